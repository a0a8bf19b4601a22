"""The vectorized metrics against literal per-row transcriptions of the papers' definitions, on
random tables with ties, missing labels, mapped generators and verdict-only judges."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from judgebias.metrics import (
    agreement,
    dbg_score,
    position_flip_rate,
    self_preference_dp,
    self_preference_eo,
    verbosity_bias,
)
from judgebias.tables.pairwise import validate

JUDGES = ["j1", "j2", "j3"]
GENS = ["j1", "j2", "j3", "base", "x"]
SELF = {"j1": {"base"}}


def random_table(seed: int, n_pairs: int = 150) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_pairs):
        ga, gb = rng.choice(GENS, 2)
        human = list(rng.choice(["a", "b", "tie"], rng.integers(0, 4), p=[0.45, 0.45, 0.1]))
        ra, rb = "w " * int(rng.integers(1, 6)), "w " * int(rng.integers(1, 6))
        for judge in JUDGES:
            row = {"pair_id": f"p{i}", "prompt": "q", "response_a": ra, "response_b": rb, "generator_a": ga,
                   "generator_b": gb, "judge": judge, "human": human}
            if judge == "j3":  # verdict-only; the verdict folds the two orders (agree, else tie)
                if rng.random() < 0.9:
                    ab, ba = (str(v) for v in rng.choice(["a", "b", "tie"], 2, p=[0.45, 0.45, 0.1]))
                    row.update(verdict_ab=ab, verdict_ba=ba, verdict=ab if ab == ba else "tie")
            else:  # P(A) is the mean of the two orders (exactly 0.5 in a tenth of the rows)
                p_ab, p_ba = (0.5, 0.5) if rng.random() < 0.1 else (float(rng.random()), float(rng.random()))
                row.update(p_a=(p_ab + p_ba) / 2, p_a_ab=p_ab, p_a_ba=p_ba)
            rows.append(row)
    return validate(pd.DataFrame(rows))[0]


def _choice(row):
    p = row["p_a"]
    if p == p:  # not NaN
        return "a" if p > 0.5 else "b" if p < 0.5 else "tie"
    return row["verdict"]


def _majority(labels):
    if not labels:
        return None
    top, k = Counter(labels).most_common(1)[0]
    return top if 2 * k > len(labels) else None


def _own(judge, gen):
    return gen == judge or gen in SELF.get(judge, ())


def _vote(row):
    p = row["p_a"]
    if p == p:
        return p
    return {"a": 1.0, "b": 0.0, "tie": 0.5}.get(row["verdict"])


def _win(p):
    return 1.0 if p > 0.5 else 0.0 if p < 0.5 else 0.5


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("judge", ["j1", "j2", "j3"])
def test_against_per_row_definitions(seed, judge):
    df = random_table(seed)
    rows = [r for r in df.to_dict("records") if r["judge"] == judge]

    # Wataoka Def. 4.1 and Eq. 4, row by row.
    tp = fn = fp = tn = own_picks = dp_n = 0
    for r in rows:
        oa, ob = _own(judge, r["generator_a"]), _own(judge, r["generator_b"])
        if oa == ob:
            continue
        own_side, c, h = ("a" if oa else "b"), _choice(r), _majority(r["human"])
        if c in ("a", "b"):
            dp_n += 1
            own_picks += c == own_side
        if h in ("a", "b") and c in ("a", "b"):
            tp += h == own_side and c == own_side
            fn += h == own_side and c != own_side
            fp += h != own_side and c == own_side
            tn += h != own_side and c != own_side
    eo = self_preference_eo(df, judge, SELF)
    assert eo.details["confusion"] == {"tp": tp, "fn": fn, "fp": fp, "tn": tn}
    assert eo.value == pytest.approx(tp / (tp + fn) - tn / (tn + fp))
    dp = self_preference_dp(df, judge, SELF)
    assert dp.n == dp_n and dp.value == pytest.approx(own_picks / dp_n - (dp_n - own_picks) / dp_n)

    # DBG: mean over other judges' votes per pair.
    by_pair = {}
    for r in df.to_dict("records"):
        if r["judge"] != judge and _vote(r) is not None:
            by_pair.setdefault(r["pair_id"], []).append(_vote(r))
    diffs = []
    for r in rows:
        oa, ob = _own(judge, r["generator_a"]), _own(judge, r["generator_b"])
        v = _vote(r)
        if oa == ob or v is None or r["pair_id"] not in by_pair:
            continue
        g = sum(by_pair[r["pair_id"]]) / len(by_pair[r["pair_id"]])
        diffs.append(_win(v if oa else 1 - v) - _win(g if oa else 1 - g))
    dbg = dbg_score(df, judge, SELF, reps=200)
    assert dbg.n == len(diffs) and dbg.value == pytest.approx(sum(diffs) / len(diffs))

    # Saito Eq. 6.
    err_short = n_short = err_long = n_long = 0
    for r in rows:
        h, c = _majority(r["human"]), _choice(r)
        wa, wb = len(r["response_a"].split()), len(r["response_b"].split())
        if h not in ("a", "b") or c not in ("a", "b") or wa == wb:
            continue
        longer = "a" if wa > wb else "b"
        if h != longer:
            n_short += 1
            err_short += c != h
        else:
            n_long += 1
            err_long += c != h
    vb = verbosity_bias(df, judge)
    assert vb.value == pytest.approx(err_short / n_short - err_long / n_long)

    # Agreement over a / b / tie.
    pairs = [(_choice(r), _majority(r["human"])) for r in rows]
    pairs = [(c, h) for c, h in pairs if c is not None and h is not None]
    assert agreement(df, judge).value == pytest.approx(sum(c == h for c, h in pairs) / len(pairs))

    # Position flips.
    flips = n = 0
    for r in rows:
        if judge == "j3":
            a, b = r["verdict_ab"], r["verdict_ba"]
            if a is None or b is None:  # a row without both orders cannot flip
                continue
        else:
            a, b = _win(r["p_a_ab"]), _win(r["p_a_ba"])
            a, b = {1.0: "a", 0.0: "b", 0.5: "tie"}[a], {1.0: "a", 0.0: "b", 0.5: "tie"}[b]
        n += 1
        flips += {a, b} == {"a", "b"}
    assert position_flip_rate(df, judge).value == pytest.approx(flips / n)
