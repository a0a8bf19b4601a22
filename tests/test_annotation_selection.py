"""Pure parts of the human annotation loop, on hand-built tables (no server)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from judgebias.annotation.feedback import (
    inter_annotator,
    latest_per_annotator,
    merge_labels,
    recompute,
    with_human_gold,
)
from judgebias.annotation.keys import pair_key
from judgebias.annotation.selection import Weights, select_pairs
from judgebias.metrics.origin import parse_self_map
from judgebias.tables.pairwise import validate


def _row(pid, judge, ga, gb, p=math.nan, ab=math.nan, ba=math.nan, verdict=None, human=()):
    return {
        "pair_id": pid,
        "prompt": f"prompt {pid}",
        "response_a": f"A of {pid}",
        "response_b": f"B of {pid}",
        "generator_a": ga,
        "generator_b": gb,
        "judge": judge,
        "p_a": p,
        "p_a_ab": ab,
        "p_a_ba": ba,
        "verdict": verdict,
        "human": list(human),
    }


def _table(rows):
    return validate(pd.DataFrame(rows))[0]


@pytest.fixture
def hand_table():
    # J is measured; G1, G2 form the gold panel.
    rows = [
        # p1: J wrote A. J 0.9 both orders; gold (0.2+0.4)/2 = 0.3.
        _row("p1", "J", "J", "X", 0.9, 0.95, 0.85),
        _row("p1", "G1", "J", "X", 0.2),
        _row("p1", "G2", "J", "X", 0.4),
        # p2: nobody's own; J flips (0.8 vs 0.3); gold 0.5.
        _row("p2", "J", "X", "Y", 0.55, 0.8, 0.3),
        _row("p2", "G1", "X", "Y", 0.5),
        _row("p2", "G2", "X", "Y", 0.5),
        # p3: J agrees with gold; G2 is verdict-only ("a" -> 1.0): gold (0.8+1.0)/2 = 0.9.
        _row("p3", "J", "X", "Y", 0.9, 0.9, 0.9),
        _row("p3", "G1", "X", "Y", 0.8),
        _row("p3", "G2", "X", "Y", verdict="a"),
        # p4: J wrote B; everyone says 0.1.
        _row("p4", "J", "Y", "J", 0.1, 0.1, 0.1),
        _row("p4", "G1", "Y", "J", 0.1),
        _row("p4", "G2", "Y", "J", 0.1),
        # p5: already carries a human label: not a candidate.
        _row("p5", "J", "J", "X", 0.5, 0.5, 0.5, human=["a"]),
        _row("p5", "G1", "J", "X", 0.5),
    ]
    return _table(rows)


def test_selection_scores_and_ranks_by_hand(hand_table):
    sel = select_pairs(hand_table, budget=3, judges=["J"])
    # score = 1*uncertain + 1*disagree + 2*self + 0.5*flip
    # p1: (1 - 2*|0.3-0.5|) + |0.9-0.3| + 2*1 + 0 = 0.6 + 0.6 + 2 = 3.2
    # p4: (1 - 2*|0.1-0.5|) + 0 + 2 = 0.2 + 2 = 2.2
    # p2: 1 + |0.55-0.5| + 0 + 0.5*1 = 1.55
    # p3: (1 - 2*|0.9-0.5|) + 0 = 0.2  (over budget)
    assert list(sel.chosen["pair_id"]) == ["p1", "p4", "p2"]
    assert sel.chosen["score"].tolist() == pytest.approx([3.2, 2.2, 1.55])
    assert sel.chosen["gold"].tolist() == pytest.approx([0.3, 0.1, 0.5])
    assert sel.exclusions.to_dict() == {"already_human_labelled": 1, "over_budget": 1}
    assert sel.candidates == 4
    reasons = dict(zip(sel.chosen["pair_id"], sel.chosen["reasons"], strict=True))
    assert reasons["p1"][0] == "self: J wrote a"
    assert any("judge vs gold" in r for r in reasons["p1"])
    assert reasons["p4"] == ["self: J wrote b"]
    assert any("flips with order" in r for r in reasons["p2"])
    assert any("gold panel split" in r for r in reasons["p2"])


def test_selection_gold_panel_defaults_to_other_judges_and_verdicts_vote(hand_table):
    sel = select_pairs(hand_table, budget=10, judges=["J"], include_labelled=True)
    gold = dict(zip(sel.chosen["pair_id"], sel.chosen["gold"], strict=True))
    assert gold["p3"] == pytest.approx(0.9)  # (0.8 + verdict "a" as 1.0) / 2
    assert gold["p5"] == pytest.approx(0.5)  # G1 only
    assert "already_human_labelled" not in sel.exclusions.to_dict()


def test_selection_excludes_pushed_keys_and_is_deterministic(hand_table):
    first = select_pairs(hand_table, budget=2, judges=["J"])
    again = select_pairs(hand_table, budget=2, judges=["J"])
    pd.testing.assert_frame_equal(first.chosen, again.chosen)
    nxt = select_pairs(hand_table, budget=2, judges=["J"], exclude_keys=first.chosen["pair_key"])
    assert list(nxt.chosen["pair_id"]) == ["p2", "p3"]
    assert nxt.exclusions.to_dict()["already_pushed"] == 2


def test_selection_self_map_and_weights(hand_table):
    renamed = hand_table.assign(
        generator_a=hand_table["generator_a"].replace("J", "J-base"),
        generator_b=hand_table["generator_b"].replace("J", "J-base"),
    )
    no_map = select_pairs(renamed, budget=4, judges=["J"])
    assert set(no_map.chosen.loc[no_map.chosen["self"] > 0, "pair_id"]) == set()
    mapped = select_pairs(renamed, budget=4, judges=["J"], self_map=parse_self_map(["J=J-base"]))
    assert set(mapped.chosen.loc[mapped.chosen["self"] > 0, "pair_id"]) == {"p1", "p4"}
    only_flip = select_pairs(hand_table, budget=1, judges=["J"], weights=Weights(0, 0, 0, 1))
    assert list(only_flip.chosen["pair_id"]) == ["p2"]
    with pytest.raises(ValueError, match="weight self"):
        Weights(self=-1)
    with pytest.raises(ValueError, match="JUDGE=GENERATOR"):
        parse_self_map(["J"])


def test_selection_ties_broken_by_key_and_bad_input():
    rows = [_row(f"q{i}", "J", "X", "Y", 0.7) for i in range(5)]
    table = _table(rows)
    sel = select_pairs(table, budget=5)
    # No gold panel other than J itself: J is its own "gold", so every score is equal.
    assert sel.chosen["score"].nunique() == 1
    assert list(sel.chosen["pair_key"]) == sorted(sel.chosen["pair_key"])
    with pytest.raises(ValueError, match="not in the table"):
        select_pairs(table, budget=1, judges=["nobody"])
    with pytest.raises(ValueError, match="budget"):
        select_pairs(table, budget=-1)


def _labels_frame(rows):
    return pd.DataFrame(
        rows,
        columns=[
            "annotation_id",
            "pair_key",
            "pair_id",
            "annotator",
            "label",
            "skipped",
            "deleted",
            "updated_at",
        ],
    )


def test_merge_is_idempotent_and_guards_changed_texts(hand_table):
    key1 = pair_key("p1", "prompt p1", "A of p1", "B of p1")
    labels = _labels_frame(
        [
            (1, key1, "p1", "u1", "a", False, False, "t1"),
            (2, key1, "p1", "u1", "b", False, False, "t2"),  # u1 re-submitted: latest wins
            (3, key1, "p1", "u2", None, True, False, "t1"),  # skip
            (4, "pk-stale", "p3", "u1", "a", False, False, "t1"),  # p3 texts changed since push
            (5, "pk-x", "zz", "u1", "a", False, False, "t1"),
        ]
    )
    assert latest_per_annotator(labels)["annotation_id"].tolist() == [2, 4, 5]
    merged, excl = merge_labels(hand_table, labels)
    assert excl.to_dict() == {"label_for_pair_not_in_table": 1, "pair_texts_changed_since_push": 1}
    by_pair = merged.drop_duplicates("pair_id").set_index("pair_id")
    assert by_pair.loc["p1", "human"] == ["b"] and by_pair.loc["p1", "human_annotators"] == ["u1"]
    assert by_pair.loc["p5", "human"] == ["a"]  # the table's own label is kept
    again, _ = merge_labels(merged, labels)
    assert again.drop_duplicates("pair_id").set_index("pair_id").loc["p1", "human"] == ["b"]


def test_inter_annotator_by_hand():
    labels = _labels_frame(
        [
            (1, "k1", "s1", "u1", "b", False, False, "t"),
            (2, "k1", "s1", "u2", "b", False, False, "t"),
            (3, "k2", "s2", "u1", "a", False, False, "t"),
            (4, "k2", "s2", "u2", "tie", False, False, "t"),
            (5, "k3", "s3", "u1", "a", False, False, "t"),
            (6, "k3", "s3", "u2", "a", False, False, "t"),
            (7, "k4", "s4", "u1", "a", False, False, "t"),
        ]
    )
    iaa = inter_annotator(labels)
    # Percent agreement over the 3 doubly-labelled pairs: (1 + 0 + 1) / 3.
    assert iaa["percent_agreement"] == pytest.approx(2 / 3)
    # Fleiss: P_i = 1, 0, 1 -> Pbar = 2/3; p_a = 3/6, p_b = 2/6, p_tie = 1/6 -> Pe = 14/36;
    # kappa = (2/3 - 14/36) / (1 - 14/36) = 5/11.
    assert iaa["fleiss_kappa"] == pytest.approx(5 / 11)
    # Cohen: po = 2/3; u1 marginals (a 2/3, b 1/3), u2 (a 1/3, b 1/3, tie 1/3) -> pe = 2/9 + 1/9 = 1/3;
    # kappa = (2/3 - 1/3) / (1 - 1/3) = 1/2.
    assert iaa["cohen_kappa"] == pytest.approx(0.5)
    assert (iaa["annotators"], iaa["pairs_labelled"], iaa["pairs_multi_labelled"]) == (2, 4, 3)


def scenario_table():
    """Five pairs where J judged its own response (s1..s5) and one where it did not (s6).
    Gold panel G1, G2. Shared with the server test."""
    spec = [  # pair, gen_a, gen_b, p_J, p_G1, p_G2
        ("s1", "J", "X", 0.9, 0.3, 0.3),
        ("s2", "X", "J", 0.2, 0.6, 0.6),
        ("s3", "J", "X", 0.8, 0.9, 0.7),
        ("s4", "X", "J", 0.7, 0.7, 0.7),
        ("s5", "J", "X", 0.4, 0.2, 0.4),
        ("s6", "X", "Y", 0.5, 0.6, 0.6),
    ]
    rows = []
    for pid, ga, gb, pj, g1, g2 in spec:
        rows += [_row(pid, "J", ga, gb, pj, pj, pj), _row(pid, "G1", ga, gb, g1), _row(pid, "G2", ga, gb, g2)]
    return _table(rows)


# Final human labels of the scenario (original terms), after the edit of s3 by u2 (b -> a).
SCENARIO_LABELS = {
    "s1": {"u1": "b", "u2": "b"},
    "s2": {"u1": "a", "u2": "tie"},
    "s3": {"u1": "a", "u2": "a"},
    "s4": {"u2": "a"},
    "s5": {"u1": "tie"},
    "s6": {"u1": "a"},
}


def check_scenario_figures(figures):
    """The hand computation of the scenario (shared with the server test).

    EO (Def. 4.1), positive = own response better, J's choice from p_a:
      s1 own=A, human b (other), J 0.9 -> own: FP      s2 [a, tie]: no strict majority, excluded
      s3 own=A, human a (own),  J 0.8 -> own: TP      s4 own=B, human a (other), J 0.7 -> A (other): TN
      s5 [tie]: excluded (human tie)                 s6: not J's own
      TPR = 1/1, TNR = 1/2 -> EO = 0.5 on n = 3.
    DBG against the panel (win credit of J's own response, judge minus gold):
      s1 1-0, s2 (1-0.2=0.8 -> 1) - (1-0.6=0.4 -> 0), s3 1-1, s4 0-0, s5 0-0 -> (1+1)/5 = 0.4
    DBG against the human-augmented gold (human vote share replaces the panel on labelled pairs):
      s1 share 0 -> gold 0, d=1; s2 share (1+.5)/2=.75 -> own B .25 -> 0, d=1; s3 share 1 -> 1, d=0;
      s4 share 1 (the skip is not a label) -> own B 0, d=0; s5 share .5 -> gold credit .5, J 0 -> d=-.5
      -> (1+1+0+0-0.5)/5 = 0.3
    Gold vs human (DBG Table 1), pairs with a strict human majority: s1 b/gold .3 b, s3 a/.8 a,
      s4 a/.7 a, s5 tie/.3 b, s6 a/.6 a -> agreement 4/5; win rate of A by gold (0+1+1+0+1)/5 = .6,
      by humans (0+1+1+.5+1)/5 = .7.
    """
    only = figures["labelled_only"]  # the plain figures on the labelled pairs, labelled as that subset
    assert "not a population" in only["note"] or "as if they were the whole population" in only["note"]
    assert only["eo"]["value"] == pytest.approx(0.5)
    assert only["eo"]["n"] == 3
    assert only["eo"]["confusion"] == {"tp": 1, "fn": 0, "fp": 1, "tn": 1}
    assert figures["dbg_panel"]["value"] == pytest.approx(0.4)
    assert only["dbg_human_gold"]["value"] == pytest.approx(0.3)
    gvh = only["gold_vs_human"]
    assert (gvh["n"], gvh["percent_agreement"]) == (5, pytest.approx(0.8))
    assert gvh["gold_win_rate_a"] == pytest.approx(0.6) and gvh["human_win_rate_a"] == pytest.approx(0.7)
    assert gvh["exclusions"] == {"human_no_majority": 1}


def test_recompute_scenario_by_hand():
    table = scenario_table()
    rows = []
    for i, (pid, by) in enumerate(sorted(SCENARIO_LABELS.items())):
        key = pair_key(pid, f"prompt {pid}", f"A of {pid}", f"B of {pid}")
        for who, lab in by.items():
            rows.append((10 * i + len(rows), key, pid, who, lab, False, False, "2026-01-01"))
    rows.append((999, pair_key("s4", "prompt s4", "A of s4", "B of s4"), "s4", "u1", None, True, False, "t"))
    _, rec = recompute(table, _labels_frame(rows), "J", reps=200)
    check_scenario_figures(rec.figures)
    assert rec.figures["labelled_only"]["eo_table_labels"]["value"] is None  # table came without labels
    assert rec.figures["estimates"] == {}  # no probability design: no population estimate
    metrics = rec.flat_metrics()
    assert metrics["labelled_only.eo"] == pytest.approx(0.5)
    assert "labelled_only.eo_table_labels" not in metrics and "eo.design" not in metrics
    assert metrics["iaa.fleiss_kappa"] == pytest.approx(5 / 11)


def test_recompute_with_a_census_design_estimates_the_population_figure():
    # Every pair drawn with probability 1 and labelled: the design estimate of EO is the plain EO over
    # the same pairs (0.5, see check_scenario_figures), with both estimators and their parts.
    import numpy as np

    from judgebias.metrics.survey import SampleDesign

    table = scenario_table()
    rows = []
    for i, (pid, by) in enumerate(sorted(SCENARIO_LABELS.items())):
        key = pair_key(pid, f"prompt {pid}", f"A of {pid}", f"B of {pid}")
        for who, lab in by.items():
            rows.append((10 * i + len(rows), key, pid, who, lab, False, False, "2026-01-01"))
    order = pd.Index(sorted(SCENARIO_LABELS))
    design = (SampleDesign(np.ones(len(order)), np.ones(len(order), bool), population="all"), order, {})
    _, rec = recompute(table, _labels_frame(rows), "J", reps=200, design=design)
    eo = rec.figures["estimates"]["eo"]
    assert eo["design_based"]["value"] == pytest.approx(0.5) and eo["ppi"]["value"] == pytest.approx(0.5)
    assert eo["labels"] == len(order) and eo["population"] == "all"
    metrics = rec.flat_metrics()
    assert metrics["eo.ppi"] == pytest.approx(0.5)  # a census: no variance, so no ESS is logged


def test_with_human_gold_replaces_panel_rows_only_on_labelled_pairs():
    table = scenario_table()
    table.loc[table["pair_id"] == "s1", "human"] = pd.Series([["b", "tie"]] * 3, index=table.index[:3])
    aug = with_human_gold(table, ["G1", "G2"])
    assert set(aug.loc[aug["pair_id"] == "s1", "judge"]) == {"J", "__human_gold__"}
    assert aug.loc[aug["judge"] == "__human_gold__", "p_a"].tolist() == [0.25]
    assert (aug["pair_id"] == "s2").sum() == 3
