"""DBG score (judge win rate on its own responses minus the gold's) on a hand-computed table."""

from __future__ import annotations

import pandas as pd
import pytest

from judgebias.metrics import dbg_score, gold_votes, pairwise_win_rates
from judgebias.metrics.frame import prepare
from judgebias.stats import InsufficientData
from judgebias.tables.pairwise import validate

PAIRS = {  # pair: (generator_a, generator_b, human)
    "P1": ("j", "o", ["b", "b", "a"]), "P2": ("o", "j", ["a"]), "P3": ("j", "o", ["tie", "a"]),
    "P4": ("j", "o", []), "P5": ("o", "g1", ["a"]), "P6": ("j", "o", ["b"]), "P7": ("j", "g1", ["a", "a"]),
}
VOTES = [  # (pair, judge, p_a or verdict)
    ("P1", "j", 0.9), ("P1", "g1", 0.8), ("P1", "g2", 0.4),
    ("P2", "j", 0.3), ("P2", "g1", 0.6), ("P2", "g2", "a"),
    ("P3", "j", 0.5), ("P3", "g1", 0.5), ("P3", "g2", 0.5),
    ("P4", "j", 0.2), ("P4", "g1", 0.3), ("P4", "g2", 0.1),
    ("P5", "j", 0.6), ("P5", "g1", 0.6),
    ("P6", "j", 0.7),
    ("P7", "j", 0.9), ("P7", "g1", 0.2), ("P7", "g2", 0.3),
]


def build() -> pd.DataFrame:
    rows = []
    for pair, judge, v in VOTES:
        ga, gb, human = PAIRS[pair]
        row = {"pair_id": pair, "prompt": "q", "response_a": "x", "response_b": "y", "generator_a": ga,
               "generator_b": gb, "judge": judge, "human": human}
        row.update({"verdict": v} if isinstance(v, str) else {"p_a": v})
        rows.append(row)
    return validate(pd.DataFrame(rows))[0]


def test_dbg_against_the_other_judges():
    est = dbg_score(build(), "j")
    # Own-response wins (1 / tie 1/2 / 0), judge vs gold = mean of g1, g2 (g2's verdict "a" = 1.0):
    # P1 own=A: judge .9 -> 1; gold (.8+.4)/2=.6 -> 1
    # P2 own=B: judge 1-.3=.7 -> 1; gold 1-(.6+1)/2=.2 -> 0
    # P3 own=A: .5 -> 1/2; gold .5 -> 1/2
    # P4 own=A: .2 -> 0; gold .2 -> 0
    # P7 own=A: .9 -> 1; gold (.2+.3)/2=.25 -> 0
    # judge = (1 + 1 + .5 + 0 + 1) / 5 = .7; gold = (1 + 0 + .5 + 0 + 0) / 5 = .3; DBG = .4
    assert est.value == pytest.approx(0.4)
    assert est.n == 5
    assert est.details["judge_win_rate"]["value"] == pytest.approx(0.7)
    assert est.details["gold_win_rate"]["value"] == pytest.approx(0.3)
    assert est.details["gold_panel"] == ["g1", "g2"]
    assert est.details["judge_ties"] == 1 and est.details["gold_ties"] == 1
    assert est.exclusions == {"no_own_response": 1, "no_gold": 1}  # P5, P6
    # d = (0, 1, 0, 0, 1): sign test 2 vs 0.
    assert est.details["judge_more_favourable"] == 2 and est.p_value == pytest.approx(0.5)
    assert est.ci_low <= est.value <= est.ci_high
    # g1 wrote P7's B response: its vote can carry its own self-preference.
    assert any("'g1'" in w and "1 of 5" in w for w in est.warnings)


def test_bootstrap_is_seeded():
    a, b = dbg_score(build(), "j", seed=3), dbg_score(build(), "j", seed=3)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)


def test_explicit_gold_panel_never_contains_the_judge():
    est = dbg_score(build(), "j", gold=["g1", "j"])
    assert est.details["gold_panel"] == ["g1"]
    assert any("dropped from its own gold" in w for w in est.warnings)
    # Gold g1 only: P1 .8 ->1, P2 own B 1-.6=.4 -> 0, P3 .5, P4 .3 -> 0, P7 .2 -> 0;
    # judge (1 + 1 + .5 + 0 + 1) / 5 = .7, gold 1.5 / 5 = .3 -> .4
    assert est.value == pytest.approx(0.4)
    with pytest.raises(ValueError, match="not in the table"):
        dbg_score(build(), "j", gold=["nobody"])


def test_humans_as_gold():
    est = dbg_score(build(), "j", human_as_gold=True)
    # Human vote share for A (tie = 1/2): P1 1/3 -> own A 0; P2 1 -> own B 0; P3 .75 -> 1;
    # P4 no labels -> no_gold; P6 0 -> 0; P7 1 -> 1.
    # judge: P1 1, P2 1, P3 .5, P6 1 (.7), P7 1 = 4.5 / 5; gold 2 / 5 -> .5
    assert est.value == pytest.approx(0.5)
    assert est.exclusions == {"no_own_response": 1, "no_gold": 1}
    assert est.details["gold_panel"] == ["human"]
    # no leak warning with humans as gold; 5 pairs are below dbg.SMALL_PAIRS, which is said, and
    # all five share the prompt "q": one cluster, which is said too
    assert len(est.warnings) == 2 and est.warnings[0].startswith("only 5 pairs: below 25")
    assert "share one cluster (prompt)" in est.warnings[1] and est.clusters == 1


def test_gold_votes_per_pair_code():
    df = prepare(build())
    votes, counts, _panel = gold_votes(df, "j")
    code = dict(zip(df["pair_id"], df["_jb_pair"], strict=False))
    assert votes[code["P2"]] == pytest.approx(0.8) and counts[code["P2"]] == 2
    assert counts[code["P6"]] == 0


def test_no_gold_judge_left_is_insufficient():
    df = build()
    with pytest.raises(InsufficientData):
        dbg_score(df[df["judge"] == "j"], "j")
    with pytest.raises(ValueError):
        dbg_score(df, "j", reps=10)


def test_pairwise_win_rates_rows():
    wr = pairwise_win_rates(build())
    j_vs = wr[(wr["rater"] == "j") & (wr["generator_x"] == "j") & (wr["generator_y"] == "o")]
    # j judging j-vs-o pairs (P1 .9, P2 own=B .7, P3 .5, P4 .2, P6 .7): wins 1, 1, .5, 0, 1 -> 3.5/5
    assert j_vs["win_rate_x"].item() == pytest.approx(0.7) and j_vs["n"].item() == 5
    assert {"gold", "human"} <= set(wr["rater"])


def test_one_gold_panel_rule_for_config_table_and_ablation():
    from judgebias.metrics.dbg import panel_rule

    # Every other judge by default; a configured panel as given; never the measured judge; the style
    # rewriter excluded; with no measured judge (a shared panel) everyone but the excluded.
    assert panel_rule(["a", "b", "c"], "a") == ["b", "c"]
    assert panel_rule(["a", "b", "c"], "a", gold=["c", "a"]) == ["c"]
    assert panel_rule(["a", "b", "c"], "b", exclude=["c"]) == ["a"]
    assert panel_rule(["a", "b"], None, exclude=["b"]) == ["a"]
