"""Self-preference bias (Wataoka Def. 4.1 and Eq. 4) on hand-computed tables."""

from __future__ import annotations

import pandas as pd
import pytest

from judgebias.metrics import (
    Confusion,
    eo_from_confusion,
    self_preference_dp,
    self_preference_eo,
    self_preference_score,
)
from judgebias.stats import InsufficientData
from judgebias.table import validate


def table(rows: list[dict]) -> pd.DataFrame:
    base = {"prompt": "q", "response_a": "x", "response_b": "y", "judge": "j"}
    df, _ = validate(pd.DataFrame([{**base, "pair_id": f"p{i}", **r} for i, r in enumerate(rows)]))
    return df


def test_paper_gpt4_confusion_matrix_gives_0_520():
    # Wataoka Fig. 2, GPT-4: TPR = 1852 / (1852 + 108) = 0.9449, TNR = 118 / (160 + 118) = 0.4245,
    # bias = 0.9449 - 0.4245 = 0.5204, reported as 0.520.
    est = eo_from_confusion(Confusion(tp=1852, fn=108, fp=160, tn=118))
    assert est.value == pytest.approx(1852 / 1960 - 118 / 278)
    assert round(est.value, 3) == 0.520
    assert est.n == 2238
    assert est.ci_low < est.value < est.ci_high
    assert est.p_value < 1e-10
    assert est.details["tpr"]["value"] == pytest.approx(0.9449, abs=1e-4)


EO_ROWS = [
    # own side, human, judge's p_a -> cell
    dict(generator_a="j", generator_b="o", human=["a"], p_a=0.9),        # TP (human own, judge own)
    dict(generator_a="j", generator_b="o", human=["a", "a", "b"], p_a=0.2),  # FN
    dict(generator_a="o", generator_b="j", human=["b"], p_a=0.1),        # TP
    dict(generator_a="j", generator_b="o", human=["b"], p_a=0.8),        # FP (human other, judge own)
    dict(generator_a="o", generator_b="j", human=["a"], p_a=0.6),        # TN
    dict(generator_a="o", generator_b="j", human=["a"], p_a=0.3),        # FP
    dict(generator_a="o", generator_b="x", human=["a"], p_a=0.6),        # no_own_response
    dict(generator_a="j", generator_b="o", human=["tie"], p_a=0.6),      # human_tie
    dict(generator_a="j", generator_b="o", human=["a"], p_a=0.5),        # judge_tie
    dict(generator_a="j", generator_b="j", human=["a"], p_a=0.6),        # both_own
    dict(generator_a="j", generator_b="o", human=["a", "b"], p_a=0.6),   # human_no_majority
    dict(generator_a="j", generator_b="o", human=[], p_a=0.6),           # no_human_label
]


def test_eo_confusion_and_exclusions():
    est = self_preference_eo(table(EO_ROWS), "j")
    assert est.details["confusion"] == {"tp": 2, "fn": 1, "fp": 2, "tn": 1}
    # TPR = 2 / 3, TNR = 1 / 3 -> 1/3
    assert est.value == pytest.approx(1 / 3)
    assert est.n == 6
    assert est.exclusions == {"no_own_response": 1, "human_tie": 1, "judge_tie": 1, "both_own": 1,
                              "human_no_majority": 1, "no_human_label": 1}
    assert est.ci_low <= est.value <= est.ci_high


def test_eo_self_map_counts_a_mapped_generator_as_own():
    rows = [dict(r, generator_a={"j": "base"}.get(r["generator_a"], r["generator_a"]),
                 generator_b={"j": "base"}.get(r["generator_b"], r["generator_b"])) for r in EO_ROWS]
    df = table(rows)
    with pytest.raises(InsufficientData):
        self_preference_eo(df, "j")  # "base" is not j's own without the mapping
    est = self_preference_eo(df, "j", {"j": {"base"}})
    assert est.value == pytest.approx(1 / 3)


def test_dp_form_and_its_position_breakdown():
    est = self_preference_dp(table(EO_ROWS), "j")
    # Exactly one own and a non-tie choice: rows 0-5, 7, 10, 11 (human not needed) = 9 pairs.
    # Picks own: rows 0, 2, 3, 5, 7, 10, 11 = 7 -> P(own) = 7/9, bias = 7/9 - 2/9 = 5/9.
    assert est.n == 9
    assert est.value == pytest.approx(5 / 9)
    assert est.details["picked_own"] == 7
    assert est.exclusions == {"no_own_response": 1, "judge_tie": 1, "both_own": 1}
    assert -1 <= est.ci_low < est.value < est.ci_high <= 1
    pos = est.details["by_position"]
    # Own is A in rows 0,1,3,7,10,11 (picked own 5 of 6); own is B in rows 2,4,5 (2 of 3).
    assert pos["p_own_when_own_is_a"] == pytest.approx(5 / 6)
    assert pos["eq4_literal"] == pytest.approx(2 / 3 - (1 - 5 / 6))


def test_mean_score_form():
    df = table([dict(generator_a="j", generator_b="o", p_a=0.9),
                dict(generator_a="o", generator_b="j", p_a=0.4),
                dict(generator_a="o", generator_b="x", p_a=0.4)])
    est = self_preference_score(df, "j")
    # score_own - score_other = 2 p_own - 1: 0.8 and 0.2 -> mean 0.5
    assert est.value == pytest.approx(0.5)
    assert est.n == 2 and est.exclusions == {"no_own_response": 1}


def test_bad_input_raises_value_error():
    df = table(EO_ROWS)
    with pytest.raises(ValueError, match="missing column"):
        self_preference_eo(df.drop(columns=["generator_a"]), "j")
    with pytest.raises(ValueError, match="no rows"):
        self_preference_eo(df, "nobody")
    with pytest.raises(ValueError, match="DataFrame"):
        self_preference_dp([1, 2], "j")
    with pytest.raises(ValueError):
        eo_from_confusion(Confusion(tp=-1, fn=0, fp=1, tn=1))
    with pytest.raises(InsufficientData):
        eo_from_confusion(Confusion(tp=0, fn=0, fp=1, tn=1))
