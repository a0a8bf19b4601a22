"""The report card's figures on small hand-computed tables: position consistency with every kind of
flip, 2-class agreement and tie rate, and the leave-one-label-out human ceiling."""

from __future__ import annotations

import pandas as pd
import pytest

from judgebias.metrics import frame as F
from judgebias.metrics.agreement import agreement_two_class, tie_rate
from judgebias.metrics.ceiling import human_ceiling
from judgebias.metrics.position import position_consistency
from judgebias.stats import InsufficientData, mean_t, wilson
from judgebias.table import validate


def table(rows: list[dict]) -> pd.DataFrame:
    base = {"prompt": "q", "response_a": "x", "response_b": "y", "judge": "j"}
    df, _ = validate(pd.DataFrame([{**base, "pair_id": f"p{i}", **r} for i, r in enumerate(rows)]))
    return df


def test_position_consistency_counts_every_kind_of_flip():
    df = table([
        dict(p_a_ab=0.8, p_a_ba=0.7),  # a / a: consistent; shift .1
        dict(p_a_ab=0.8, p_a_ba=0.3),  # a / b: the first-shown won both times (primacy); shift .5
        dict(p_a_ab=0.6, p_a_ba=0.5),  # a / tie: inconsistent, not an A<->B flip; shift .1
        dict(verdict_ab="b", verdict_ba="a"),  # b / a: the second-shown won both times (recency)
        dict(p_a_ab=0.9),  # one order only: excluded
        dict(p_a_ab=0.2, p_a_ba=0.1),  # b / b: consistent; shift .1
    ])
    pc = position_consistency(df, "j")
    # 5 pairs in both orders, 2 consistent
    assert (pc.value, pc.n, pc.exclusions) == (pytest.approx(2 / 5), 5, {"missing_order": 1})
    assert (pc.ci_low, pc.ci_high) == pytest.approx(wilson(2, 5)[1:])
    d = pc.details
    assert d["outcomes"] == {"a_a": 1, "b_b": 1, "tie_tie": 0, "primacy_flip": 1, "recency_flip": 1,
                             "a_tie": 1, "tie_a": 0, "b_tie": 0, "tie_b": 0}
    assert (d["flips_ab"], d["flips_choice_tie"]) == (2, 1)
    # balance per pair: 0, -1 (primacy), 0, +1 (recency), 0 -> mean 0
    assert d["preference_fairness"]["value"] == pytest.approx(0.0) and d["preference_fairness"]["n"] == 5
    # shifts .1, .5, .1, .1 on the 4 pairs with probabilities -> .2
    shift = d["mean_p_a_shift"]
    assert shift["value"] == pytest.approx(0.2) and shift["n"] == 4
    assert shift["ci_low"] == pytest.approx(mean_t([0.1, 0.5, 0.1, 0.1])["ci_low"])


def test_position_consistency_of_a_primacy_judge_and_without_orders():
    df = table([dict(verdict_ab="a", verdict_ba="b")] * 3)  # the first-shown always wins
    pc = position_consistency(df, "j")
    assert pc.value == 0 and pc.details["preference_fairness"]["value"] == -1
    assert "mean_p_a_shift" not in pc.details  # verdicts only: no probabilities to shift
    with pytest.raises(InsufficientData):
        position_consistency(table([dict(verdict="a")]), "j")


def test_two_class_agreement_and_tie_rate():
    df = table([
        dict(verdict="a", human=["a"]),  # agrees
        dict(verdict="tie", human=["b"]),  # a judge tie on a 2-class pair: a miss
        dict(verdict="b", human=["tie"]),  # human tie: not a 2-class pair
        dict(verdict="b", human=["a", "b"]),  # no human majority
        dict(verdict="b", human=["b", "b", "a"]),  # agrees
    ])
    two = agreement_two_class(df, "j")
    assert (two.value, two.n) == (pytest.approx(2 / 3), 3)
    assert two.exclusions == {"human_tie": 1, "human_no_majority": 1}
    assert two.details["judge_ties"] == 1
    ties = tie_rate(df, "j")  # 1 tie among 5 choices
    assert (ties.value, ties.n) == (pytest.approx(1 / 5), 5)


def test_human_counts_are_recovered_from_the_prepared_columns():
    df = table([dict(verdict="a", human=h) for h in (["a", "a", "b"], ["tie", "b"], [], ["tie"] * 3)])
    assert F.human_counts(F.prepare(df)).tolist() == [[2, 1, 0], [0, 1, 1], [0, 0, 0], [0, 0, 3]]


def test_human_ceiling_leaves_one_label_out_and_scores_the_judge_on_the_same_references():
    df = table([
        # held out a -> others {a, b}: no majority (x2); held out b -> others {a, a}: a, b misses.
        # human 0/1; the judge's a matches the one reference: 1/1
        dict(verdict="a", human=["a", "a", "b"]),
        dict(verdict="b", human=["a", "a", "a"]),  # every reference a: human 3/3, judge 0/3
        dict(verdict="b", human=["b", "b", "tie"]),  # only the held-out tie has one (b): human 0, judge 1
        dict(verdict="tie", human=["a", "b"]),  # references b and a: human 0/2, judge 0/2
        dict(verdict="a", human=["a"]),  # one label: nothing to compare it with
        dict(verdict="a", human=["a", "b", "tie"]),  # no held-out label has a majority left
        # held out a (x3) -> {a, a, b}: a; held out b -> {a, a, a}: a. human 3/4, judge 4/4
        dict(verdict="a", human=["a", "a", "a", "b"]),
    ])
    c = human_ceiling(df, "j")
    assert c.exclusions == {"fewer_than_two_labels": 1, "no_leave_one_out_majority": 1}
    human, judge = [0, 1, 0, 0, 0.75], [1, 0, 1, 0, 1]
    assert (c.value, c.n) == (pytest.approx(sum(human) / 5), 5)  # .35
    assert c.details["judge"]["value"] == pytest.approx(sum(judge) / 5)  # .6
    gap = mean_t([j - h for j, h in zip(judge, human, strict=True)])
    assert c.details["gap"]["value"] == pytest.approx(0.25)
    assert c.details["gap"]["ci_low"] == pytest.approx(gap["ci_low"])
    assert c.details["labels_compared"] == 1 + 3 + 1 + 2 + 4
    with pytest.raises(InsufficientData):
        human_ceiling(table([dict(verdict="a", human=["a"])]), "j")
