"""Adjusted p-values (Holm, Benjamini-Hochberg) by hand, the declared family of statement tests, and
the p-value that self-recognition's statement rests on."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from judgebias.multiplicity import adjust, benjamini_hochberg, check_method, holm
from judgebias.reporting.trust import attach, declare, family

# Four tests, m = 4, raw p = [0.01, 0.04, 0.03, 0.005] (input order i = 0..3).
# Sorted ascending: 0.005 (i=3), 0.01 (i=0), 0.03 (i=2), 0.04 (i=1).
# Holm: (m - k + 1) p_(k) = 4*0.005 = 0.02, 3*0.01 = 0.03, 2*0.03 = 0.06, 1*0.04 = 0.04;
#   running maximum 0.02, 0.03, 0.06, 0.06 -> in input order [0.03, 0.06, 0.06, 0.02]:
#   at 0.05 Holm rejects i=0 and i=3 only.
# BH: m p_(k) / k = 4*0.005/1 = 0.02, 4*0.01/2 = 0.02, 4*0.03/3 = 0.04, 4*0.04/4 = 0.04;
#   running minimum from the largest down: 0.04, 0.04, 0.02, 0.02 -> in input order
#   [0.02, 0.04, 0.04, 0.02]: BH rejects all four.
RAW = [0.01, 0.04, 0.03, 0.005]
HOLM = [0.03, 0.06, 0.06, 0.02]
BH = [0.02, 0.04, 0.04, 0.02]


def test_holm_and_bh_by_hand():
    assert holm(RAW) == pytest.approx(HOLM)
    assert benjamini_hochberg(RAW) == pytest.approx(BH)
    assert adjust(RAW) == pytest.approx(HOLM) and adjust(RAW, "BH") == pytest.approx(BH)
    # Capped at 1: Holm 2*0.5 = 1.0, then max(1.0, 0.9) = 1.0; BH 2*0.5/1 = 1.0, 2*0.9/2 = 0.9,
    # running minimum from the top 0.9, 0.9.
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert benjamini_hochberg([0.5, 0.9]) == pytest.approx([0.9, 0.9])
    # One test: nothing to adjust. None: an empty family.
    assert holm([0.2]) == [0.2] and benjamini_hochberg([]) == []


def test_agrees_with_statsmodels():
    from statsmodels.stats.multitest import multipletests

    p = [0.001, 0.2, 0.049, 0.049, 0.5, 0.0101, 1.0, 0.03]
    assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert benjamini_hochberg(p) == pytest.approx(list(multipletests(p, method="fdr_bh")[1]))


@pytest.mark.parametrize("bad", [[0.1, math.nan], [-0.01], [1.2], [[0.1, 0.2]]])
def test_bad_p_values_are_refused(bad):
    with pytest.raises(ValueError):
        holm(bad)
    with pytest.raises(ValueError):
        benjamini_hochberg(bad)


def test_unknown_method_is_named():
    assert check_method(" Holm ") == "holm" and check_method("benjamini-hochberg") == "bh"
    with pytest.raises(ValueError, match="holm, bh"):
        adjust([0.1], "bonferroni")


def _est(value, p, **extra):
    return {"value": value, "ci_low": value - 0.1, "ci_high": value + 0.1, "n": 100, "p_value": p, **extra}


METRICS = {
    "position_bias": _est(0.58, 0.001),
    "position_consistency": {"value": 0.7, "ci_low": 0.6, "ci_high": 0.8, "n": 100},
    "human_ceiling": {"value": 0.8, "n": 50, "judge": {"value": 0.7}, "gap": _est(-0.1, 0.2)},
    "self_preference_eo": _est(0.2, 0.02),
    "dbg": _est(0.1, 0.5, gold_panel=["x", "y"]),
    "verbosity_bias": _est(0.05, 0.9),
    "regression": {"terms": {"human_a": {"coef": 1.0, "p_value": 0.0},
                             "word_diff": {"coef": 0.3, "ci_low": 0.1, "ci_high": 0.5, "p_value": 0.004},
                             "self_origin": {"coef": 0.1, "ci_low": -0.1, "ci_high": 0.3, "p_value": 0.3}}},
}


def test_the_family_is_declared_once_and_adjusted_together():
    tests = declare(METRICS)
    assert [t.key for t in tests] == ["order", "human_ceiling", "self_preference_eo", "dbg", "verbosity_bias",
                                      "style:word_diff", "style:self_origin"]
    assert [t.direction for t in tests] == [1, -1, 1, 1, 1, 1, 1]
    fam = family(METRICS)
    assert fam.method == "holm" and fam.size == 7
    # Holm on 7: 7*0.001 = 0.007 (order), 6*0.004 = 0.024 (word_diff), 5*0.02 = 0.10 (EO).
    assert fam.p("order") == pytest.approx((0.001, 0.007))
    assert fam.rejects("order") == 1 and fam.rejects("style:word_diff") == 1
    assert fam.rejects("self_preference_eo") == 0 and fam.raw_only("self_preference_eo")
    # Mutual gold: DBG is explained, never claimed, so it is no member.
    assert "dbg" not in [t.key for t in declare(METRICS, mutual_gold=True)]
    # The probes join the family of their judge.
    old_recognition = {"value": 0.8, "n": 10, "correct": 8}
    probes = {"perturbations": {"judges": {"j": {"authority@1": {"shift": _est(0.1, 0.01)}}}},
              "self_recognition": {"judges": {"j": {"self_recognition": old_recognition}}}}
    both = family(METRICS, probes, "j", method="bh")
    assert both.size == 9 and both.method == "bh"
    # No p_value on an old recognition figure: the exact binomial test from its counts, 8 of 10:
    # 2 * (C(10,8) + C(10,9) + C(10,10)) / 2^10 = 2 * 56 / 1024 = 0.109375.
    assert both.p("self_recognition")[0] == pytest.approx(0.109375)


def test_attach_writes_raw_and_adjusted_beside_each_figure():
    result = {"judges": {"j": METRICS}}
    out = attach(result, method="holm")
    m = out["judges"]["j"]
    assert "p_adjusted" not in METRICS["position_bias"]  # the input is left as it was
    assert m["position_bias"]["p_adjusted"] == pytest.approx(0.007)
    assert m["human_ceiling"]["gap"]["p_adjusted"] >= m["human_ceiling"]["gap"]["p_value"]
    assert m["regression"]["terms"]["word_diff"]["p_adjusted"] == pytest.approx(0.024)
    assert "p_adjusted" not in m["regression"]["terms"]["human_a"]  # a control, not a statement
    fam = m["multiplicity"]
    assert fam["method"] == "holm" and fam["tests"] == 7 and len(fam["members"]) == 7
    first = fam["members"][0]
    assert {k: first[k] for k in ("test", "figure", "p_value", "p_adjusted")} == {
        "test": "order", "figure": "position_bias", "p_value": 0.001, "p_adjusted": pytest.approx(0.007)}
    # The position bias rejects 0.5 after adjustment: a caution, whatever its equivalence test says.
    assert first["verdict"] == "caution" and m["position_bias"]["verdict"] == "caution"
    assert first["margin"] == 0.03 and first["margin_null"] == 0.5


def test_self_recognition_carries_its_binomial_test():
    from judgebias.metrics.recognition import self_recognition

    # Ten pairs with one own response, the own one judged more likely "mine" on all ten:
    # exact two-sided binomial p = 2 * 0.5^10 = 0.001953125.
    df = pd.DataFrame({"pair_id": [f"r{i}" for i in range(10)], "judge": "j",
                       "generator_a": ["j", "o"] * 5, "generator_b": ["o", "j"] * 5,
                       "p_a": [0.9, 0.2] * 5})
    d = self_recognition(df, "j").to_dict()
    assert d["value"] == 1.0 and d["p_value"] == pytest.approx(2 * 0.5**10)
    assert d["ci_high"] == pytest.approx(1.0)  # the interval is unchanged (Wilson)
