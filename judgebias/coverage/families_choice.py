"""Families of the choice figures: position consistency and bias, agreement and kappa, the human
ceiling, verbosity bias. Truths in closed form from each process's parameters."""

from __future__ import annotations

import itertools

import numpy as np
from scipy import stats as st

from judgebias.coverage import tables as T
from judgebias.coverage.registry import Family, Figure, of_estimate, of_part, safely
from judgebias.metrics.agreement import agreement, agreement_two_class, cohen_kappa, tie_rate
from judgebias.metrics.ceiling import human_ceiling
from judgebias.metrics.position import position_bias, position_consistency, position_flip_rate
from judgebias.metrics.verbosity import verbosity_bias

A, B, TIE = 0, 1, 2
WILSON, T_PROB = "Agresti-Coull", "t clipped to [0, 1]"
KAPPA = "Wilson on kappa's effective n, mapped"

# --- position, with probabilities: pairs where A is better, B is better, or neither; a judge
# strongly pulled to the first-shown response, P(A) close to 0 or 1 (Beta with a mass near a bound).
_POS_TYPES = np.array([0.4, 0.4, 0.2])
_POS_AB = ((6.0, 1.0), (1.5, 2.0), (3.0, 1.0))   # Beta of P(A) with A shown first, per type
_POS_BA = ((2.0, 1.5), (1.0, 6.0), (1.0, 3.0))   # Beta of P(A) (original terms) with B shown first


def _position_prob_truths() -> dict[str, float]:
    a_ab = np.array([st.beta.sf(0.5, *p) for p in _POS_AB])   # P(A chosen, A first)
    a_ba = np.array([st.beta.sf(0.5, *p) for p in _POS_BA])   # P(A chosen, B first)
    m_ab = np.array([st.beta.mean(*p) for p in _POS_AB])
    m_ba = np.array([st.beta.mean(*p) for p in _POS_BA])
    w = _POS_TYPES
    consistent = float(w @ (a_ab * a_ba + (1 - a_ab) * (1 - a_ba)))
    return {"position_consistency": consistent, "position_flip_rate": 1.0 - consistent,
            "position_bias": float(w @ ((m_ab + 1 - m_ba) / 2)),
            # recency: B chosen A-first and A chosen B-first; primacy the other way round
            "preference_fairness": float(w @ ((1 - a_ab) * a_ba - a_ab * (1 - a_ba))),
            "mean_p_a_shift": float(w @ (m_ab - m_ba))}


def _simulate_position_probs(rng: np.random.Generator, n: int):
    kind = T.categorical(rng, _POS_TYPES, n)
    p_ab = rng.beta(np.take([p[0] for p in _POS_AB], kind), np.take([p[1] for p in _POS_AB], kind))
    p_ba = rng.beta(np.take([p[0] for p in _POS_BA], kind), np.take([p[1] for p in _POS_BA], kind))
    return T.table(n, columns={"p_a_ab": p_ab, "p_a_ba": p_ba, "p_a": (p_ab + p_ba) / 2})


def _estimate_position(df, with_shift: bool) -> dict:
    cons = safely(lambda: position_consistency(df, T.JUDGE))
    out = {"position_flip_rate": safely(lambda: of_estimate(position_flip_rate(df, T.JUDGE))),
           "position_bias": safely(lambda: of_estimate(position_bias(df, T.JUDGE)))}
    if cons is not None:
        out["position_consistency"] = of_estimate(cons)
        out["preference_fairness"] = of_part(cons.details["preference_fairness"])
        if with_shift and "mean_p_a_shift" in cons.details:
            out["mean_p_a_shift"] = of_part(cons.details["mean_p_a_shift"])
    return out


# --- position, verdict-only judge with ties: the nine (A-first, B-first) outcomes drawn directly.
_OUTCOMES = {(A, A): 0.25, (B, B): 0.20, (TIE, TIE): 0.05, (A, B): 0.25, (B, A): 0.05,
             (A, TIE): 0.06, (TIE, A): 0.03, (B, TIE): 0.03, (TIE, B): 0.08}
_OUT_KEYS = list(_OUTCOMES)
_OUT_P = np.array(list(_OUTCOMES.values()))


def _position_verdict_truths() -> dict[str, float]:
    first_ab = {A: 1.0, B: 0.0, TIE: 0.5}   # A shown first: A is the first-shown response
    first_ba = {B: 1.0, A: 0.0, TIE: 0.5}
    return {
        "position_consistency": sum(p for (x, y), p in _OUTCOMES.items() if x == y),
        "position_flip_rate": _OUTCOMES[(A, B)] + _OUTCOMES[(B, A)],
        "position_bias": sum(p * (first_ab[x] + first_ba[y]) / 2 for (x, y), p in _OUTCOMES.items()),
        "preference_fairness": _OUTCOMES[(B, A)] - _OUTCOMES[(A, B)],
    }


def _simulate_position_verdicts(rng: np.random.Generator, n: int):
    k = T.categorical(rng, _OUT_P, n)
    ab = np.array([o[0] for o in _OUT_KEYS])[k]
    ba = np.array([o[1] for o in _OUT_KEYS])[k]
    return T.table(n, columns={"verdict_ab": T.choice_labels(ab), "verdict_ba": T.choice_labels(ba)})


# --- agreement: a joint table of judge choice (rows a, b, tie) x human majority (columns).
_AGREE_MID = np.array([[0.28, 0.06, 0.08], [0.07, 0.25, 0.09], [0.03, 0.02, 0.12]])   # tie-heavy humans
_AGREE_HIGH = np.array([[0.46, 0.01, 0.01], [0.01, 0.45, 0.01], [0.005, 0.005, 0.04]])  # near the bound


def agreement_truths(joint: np.ndarray) -> dict[str, float]:
    """Population agreement, kappa, two-class agreement and tie rate of a judge x human table."""
    joint = np.asarray(joint, dtype=float)
    po = float(np.trace(joint))
    pe = float(joint.sum(axis=1) @ joint.sum(axis=0))
    return {"agreement_human": po, "kappa_human": (po - pe) / (1 - pe),
            "agreement_human_2class": float((joint[A, A] + joint[B, B]) / joint[:, :2].sum()),
            "tie_rate": float(joint[TIE].sum())}


def _simulate_agreement(joint: np.ndarray):
    flat = np.asarray(joint, dtype=float).ravel()

    def simulate(rng: np.random.Generator, n: int):
        cell = T.categorical(rng, flat, n)
        judge, human = np.divmod(cell, 3)
        return T.table(n, human=T.one_label(human), columns={"verdict": T.choice_labels(judge)})
    return simulate


def _agreement_family(name: str, what: str, setting: str, joint: np.ndarray) -> Family:
    """The agreement figures on tables drawn from ``joint`` (human x judge over a/b/tie)."""
    truths = agreement_truths(joint)
    figures = (("agreement_human", WILSON), ("kappa_human", KAPPA), ("agreement_human_2class", WILSON),
               ("tie_rate", WILSON))
    return Family(name, what, setting, tuple(Figure(k, m, truths[k]) for k, m in figures),
                  _simulate_agreement(joint), _estimate_agreement)


def _estimate_agreement(df) -> dict:
    return {"agreement_human": safely(lambda: of_estimate(agreement(df, T.JUDGE))),
            "kappa_human": safely(lambda: of_estimate(cohen_kappa(df, T.JUDGE))),
            "agreement_human_2class": safely(lambda: of_estimate(agreement_two_class(df, T.JUDGE))),
            "tie_rate": safely(lambda: of_estimate(tie_rate(df, T.JUDGE)))}


# --- the human ceiling: three labels per pair from the pair's type; the judge's choice too.
_CEIL_TYPES = np.array([0.4, 0.35, 0.25])                               # clear A, clear B, contested
_CEIL_LABEL = np.array([[0.85, 0.05, 0.10], [0.05, 0.85, 0.10], [0.4, 0.4, 0.2]])
_CEIL_JUDGE = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.45, 0.45, 0.1]])
_CEIL_LABELS = 3


def ceiling_scores(counts: tuple[int, int, int], choice: int) -> tuple[float, float] | None:
    """(human, judge) leave-one-label-out scores of one pair, or None when no held-out label has a
    strict majority among the others. Written from the definition, apart from the product."""
    m = sum(counts)
    weight = human = judge = 0
    for k in range(3):
        if counts[k] == 0:
            continue
        others = list(counts)
        others[k] -= 1
        top = max(range(3), key=lambda c: (others[c], -c))
        if others[top] * 2 > m - 1:
            weight += counts[k]
            human += counts[k] * (top == k)
            judge += counts[k] * (top == choice)
    return None if weight == 0 else (human / weight, judge / weight)


def _ceiling_truths() -> dict[str, float]:
    kept = human = judge = 0.0
    for t, pt in enumerate(_CEIL_TYPES):
        for labels in itertools.product(range(3), repeat=_CEIL_LABELS):
            counts = tuple(labels.count(k) for k in range(3))
            p_labels = float(np.prod(_CEIL_LABEL[t][list(labels)]))
            for choice in range(3):
                s = ceiling_scores(counts, choice)
                if s is not None:
                    w = pt * p_labels * _CEIL_JUDGE[t, choice]
                    kept, human, judge = kept + w, human + w * s[0], judge + w * s[1]
    return {"human_ceiling": human / kept, "human_ceiling.judge": judge / kept,
            "human_ceiling.gap": (judge - human) / kept}


def _simulate_ceiling(rng: np.random.Generator, n: int):
    kind = T.categorical(rng, _CEIL_TYPES, n)
    labels = np.stack([T.conditional(rng, kind, _CEIL_LABEL) for _ in range(_CEIL_LABELS)], axis=1)
    counts = np.stack([(labels == k).sum(axis=1) for k in range(3)], axis=1)
    choice = T.conditional(rng, kind, _CEIL_JUDGE)
    return T.table(n, human=counts, columns={"verdict": T.choice_labels(choice)})


def _estimate_ceiling(df) -> dict:
    est = safely(lambda: human_ceiling(df, T.JUDGE))
    if est is None:
        return {}
    return {"human_ceiling": of_estimate(est), "human_ceiling.judge": of_part(est.details["judge"]),
            "human_ceiling.gap": of_part(est.details["gap"])}


# --- verbosity (Saito Eq. 6): human choice longer / shorter / tie, judge choice given it.
_VERB_HUMAN = np.array([0.6, 0.15, 0.25])        # longer, shorter, tie: few "shorter" pairs, tie-heavy
_VERB_JUDGE = np.array([[0.80, 0.12, 0.08],      # judge longer / shorter / tie given human longer
                        [0.45, 0.45, 0.10],      # ... given human shorter
                        [0.60, 0.30, 0.10]])     # ... given a human tie
_VERB_EQUAL = 0.1                                # pairs of equal word count (left out of Eq. 6)


def _verbosity_truth() -> float:
    j = _VERB_JUDGE
    return float(j[1, 0] / (j[1, 0] + j[1, 1]) - j[0, 1] / (j[0, 0] + j[0, 1]))


def _simulate_verbosity(rng: np.random.Generator, n: int):
    human_rel = T.categorical(rng, _VERB_HUMAN, n)        # relative to the longer response
    judge_rel = T.conditional(rng, human_rel, _VERB_JUDGE)
    longer = rng.integers(0, 2, n)                         # 0: A is longer
    wa = rng.integers(40, 400, n)
    gap = rng.integers(1, 200, n)
    equal = rng.random(n) < _VERB_EQUAL
    wb = np.where(equal, wa, np.where(longer == 0, np.maximum(wa - gap, 1), wa + gap))
    wa = np.where(~equal & (longer == 0) & (wb == wa), wa + 1, wa)

    def absolute(rel):  # longer/shorter/tie relative to the longer side -> a/b/tie
        return np.where(rel == 2, TIE, np.where(rel == 0, longer, 1 - longer))
    return T.table(n, human=T.one_label(absolute(human_rel)), words=(wa, wb),
                   columns={"verdict": T.choice_labels(absolute(judge_rel))})


FAMILIES: tuple[Family, ...] = (
    Family("position_probs", "judge P(A) in both orders, strong primacy",
           "P(A) from Beta laws with mass near 0 and 1; 20% of pairs of equal quality",
           tuple(Figure(k, m, _position_prob_truths()[k]) for k, m in (
               ("position_consistency", WILSON), ("position_flip_rate", WILSON), ("position_bias", T_PROB),
               ("preference_fairness", "t clipped to [-1, 1]"), ("mean_p_a_shift", "t clipped to [-1, 1]"))),
           _simulate_position_probs, lambda df: _estimate_position(df, True)),
    Family("position_verdicts", "verdict-only judge in both orders, with ties",
           "18% of pairs with a tie in one order, 5% in both; primacy flips 5x recency",
           tuple(Figure(k, m, _position_verdict_truths()[k]) for k, m in (
               ("position_consistency", WILSON), ("position_flip_rate", WILSON),
               ("position_bias", T_PROB), ("preference_fairness", "t clipped to [-1, 1]"))),
           _simulate_position_verdicts, lambda df: _estimate_position(df, False)),
    _agreement_family("agreement", "judge vs one human label over a/b/tie",
                      "tie-heavy humans (29% ties), judge ties 17%", _AGREE_MID),
    _agreement_family("agreement_high", "a judge agreeing with humans on 95% of pairs",
                      "agreement and kappa near their upper bound", _AGREE_HIGH),
    Family("ceiling", "three human labels per pair, leave one out",
           "25% contested pairs (labels split a/b/tie); ties in labels and judge",
           tuple(Figure(k, "t clipped to the range", v) for k, v in _ceiling_truths().items()),
           _simulate_ceiling, _estimate_ceiling),
    Family("verbosity", "Saito Eq. 6 on word counts",
           "few pairs where humans chose the shorter response (15%), 25% human ties, 10% equal lengths",
           (Figure("verbosity_bias", "Newcomb", _verbosity_truth()),),
           _simulate_verbosity,
           lambda df: {"verbosity_bias": safely(lambda: of_estimate(verbosity_bias(df, T.JUDGE)))}),
)
