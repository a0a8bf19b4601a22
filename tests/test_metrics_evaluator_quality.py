"""The evaluator quality baseline (Roytburg et al. 2026) on hand-computed tables, its cluster-robust
interval, its skip reasons, and what the self-preference statement says with it."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats

from judgebias.metrics import frame as F
from judgebias.metrics.evaluator_quality import family_preference_eqb, self_preference_eqb
from judgebias.reporting.analysis import analyze
from judgebias.reporting.trust import declare, family, trust_summary
from judgebias.stats import InsufficientData
from judgebias.tables.pairwise import validate


def rows(spec, judge: str = "j", extra: dict | None = None) -> pd.DataFrame:
    """(prompt, generator_a, generator_b, human label or None, p_a or None, verdict or None) per row."""
    out = []
    for i, (q, ga, gb, human, p_a, verdict) in enumerate(spec):
        row = {"pair_id": f"p{i}", "prompt": q, "response_a": f"a{i}", "response_b": f"b{i}",
               "generator_a": ga, "generator_b": gb, "judge": judge,
               "human": [human] * 3 if human else [], "p_a": p_a, "verdict": verdict}
        row.update({k: v[i] for k, v in (extra or {}).items()})
        out.append(row)
    return validate(pd.DataFrame(out))[0]


# Judge j also generates; k1, k2 and r are other models. Row by row, what the baseline reads:
HAND = [
    ("q1", "j", "r", "b", 0.8, None),    # own wrong (r wins): vote for own = 0.8, stratum (q1, r)
    ("q1", "k1", "r", "b", 0.4, None),   # k1 wrong against r: vote for k1 = 0.4 -> baseline of (q1, r)
    ("q1", "r", "k2", "a", 0.9, None),   # k2 wrong against r: vote for k2 = 1 - 0.9 = 0.1 -> (q1, r)
    ("q2", "r", "j", "a", None, "b"),    # own wrong, verdict for own: vote 1.0, stratum (q2, r)
    ("q2", "k1", "r", "b", None, "tie"),  # k1 wrong against r, a tie verdict: vote 0.5 -> (q2, r)
    ("q3", "j", "k1", "b", 0.3, None),   # own wrong against k1: vote 0.3, stratum (q3, k1)
    ("q3", "k2", "k1", "b", 0.6, None),  # k2 wrong against k1: vote 0.6 -> (q3, k1)
    ("q3", "k2", "r", "b", 0.2, None),   # k2 wrong against r: no own pair lost to r on q3, unused
    ("q4", "j", "r", "b", 0.7, None),    # own wrong, but nobody else lost to r on q4: no_comparable_pair
    ("q4", "j", "k2", "a", 0.9, None),   # own preferred: own_preferred (the "legitimate" side, vote 0.9)
    ("q4", "k1", "k2", "a", 0.6, None),  # k1 beat k2: baseline of the legitimate side (q4, k2), vote 0.6
    ("q1", "j", "k1", "tie", 0.5, None),  # humans tie: human_tie
]


def test_the_baseline_on_a_hand_computed_table():
    est = self_preference_eqb(rows(HAND), "j")
    # Strata: (q1, r): 0.8 - (0.4 + 0.1) / 2 = 0.55; (q2, r): 1.0 - 0.5 = 0.5; (q3, k1): 0.3 - 0.6 = -0.3.
    # Mean 0.75 / 3 = 0.25; deviations 0.30, 0.25, -0.55, squares sum 0.455, s^2 = 0.2275,
    # SE = sqrt(0.2275 / 3) = 0.27538; one stratum per question: the t interval on 3 - 1 = 2 df.
    se = math.sqrt(0.2275 / 3)
    q = stats.t.ppf(0.975, 2)  # 4.3027
    assert est.value == pytest.approx(0.25)
    assert est.ci_low == pytest.approx(0.25 - q * se)  # -0.935
    assert est.ci_high == 1.0  # 0.25 + 1.185 clipped to what a difference of votes can be
    assert est.statistic == pytest.approx(0.25 / se)
    assert est.p_value == pytest.approx(2 * stats.t.sf(0.25 / se, 2))
    assert est.n == 3
    assert dict(est.exclusions) == {"no_comparable_pair": 1, "own_preferred": 1, "human_tie": 1}
    d = est.details
    assert d["own_wrong_vote"]["value"] == pytest.approx((0.8 + 1.0 + 0.3) / 3)  # 0.7
    assert d["other_wrong_vote"]["value"] == pytest.approx((0.25 + 0.5 + 0.6) / 3)  # 0.45
    assert d["own_wrong_vote_unmatched"] == pytest.approx((0.8 + 1.0 + 0.3 + 0.7) / 4)  # every own wrong row
    assert (d["own_wrong_rows"], d["own_wrong_rows_matched"], d["questions"]) == (4, 3, 3)
    # One stratum per prompt (the default cluster): the clustered interval is the plain one.
    assert (est.clusters, est.cluster_by, est.design_effect) == (3, "prompt", 1.0)
    # The legitimate side: (q4, k2): own won with vote 0.9, k1 beat k2 with vote 0.6 -> 0.3, one stratum.
    assert d["when_own_better"]["value"] == pytest.approx(0.3) and d["when_own_better"]["n"] == 1
    assert d["reference"] == "the human majority"
    assert est.warnings and "rests on only 3 clusters (prompt)" in est.warnings[0]


def test_a_sparse_key_space_gives_the_same_strata(monkeypatch):
    import judgebias.metrics.evaluator_quality as eq

    dense = self_preference_eqb(rows(HAND), "j")
    monkeypatch.setattr(eq, "_DENSE_PER_ROW", 0)
    monkeypatch.setattr(eq, "_DENSE_EXTRA", 0)  # every key space counts as sparse: renumbered first
    sparse = self_preference_eqb(rows(HAND), "j")
    assert sparse == dense


def test_two_strata_of_one_question_are_one_cluster():
    spec = [("q1", "j", "r", "b", 0.9, None), ("q1", "k1", "r", "b", 0.1, None),   # (q1, r): 0.8
            ("q1", "j", "k2", "b", 0.7, None), ("q1", "k1", "k2", "b", 0.3, None),  # (q1, k2): 0.4
            ("q2", "j", "r", "b", 0.5, None), ("q2", "k2", "r", "b", 0.5, None),    # (q2, r): 0.0
            ("q3", "j", "r", "b", 0.6, None), ("q3", "k1", "r", "b", 0.4, None)]    # (q3, r): 0.2
    est = self_preference_eqb(rows(spec), "j")
    # Mean (0.8 + 0.4 + 0.0 + 0.2) / 4 = 0.35; q1's residuals 0.45 + 0.05 = 0.5, q2 -0.35, q3 -0.15:
    # CR1 Var = 3/2 x (0.25 + 0.1225 + 0.0225) / 4^2 = 0.03703125, t on 3 - 1 = 2 df; as independent
    # strata 4/3 x (0.2025 + 0.0025 + 0.1225 + 0.0225) / 4^2 = 0.0291667: design effect 1.2696.
    assert est.value == pytest.approx(0.35) and est.n == 4 and est.details["questions"] == 3
    se = math.sqrt(1.5 * 0.395 / 16)
    assert est.statistic == pytest.approx(0.35 / se)
    assert est.p_value == pytest.approx(2 * stats.t.sf(0.35 / se, 2))
    assert est.ci_low == pytest.approx(0.35 - stats.t.ppf(0.975, 2) * se)
    assert (est.clusters, est.cluster_by) == (3, "prompt")
    assert est.design_effect == pytest.approx(0.03703125 / (4 / 3 * 0.35 / 16))
    # --cluster-by none: every stratum stands alone, the one-sample t over 4 strata (s^2 = 0.35 / 3).
    alone = self_preference_eqb(F.prepare(rows(spec), cluster_by="none"), "j")
    se = math.sqrt(0.35 / 3 / 4)
    assert alone.value == pytest.approx(0.35) and (alone.clusters, alone.cluster_by) == (4, "none")
    assert alone.p_value == pytest.approx(2 * stats.t.sf(0.35 / se, 3))
    # Clustered by another column: strata of q1 and q2 in one cluster, q3 in another (2 clusters).
    other = rows(spec, extra={"batch": ["x"] * 6 + ["y"] * 2})
    two = self_preference_eqb(F.prepare(other, cluster_by="batch"), "j")
    assert (two.clusters, two.cluster_by) == (2, "batch")
    # Cluster sums of residuals: x 0.45 + 0.05 - 0.35 = 0.15, y -0.15: Var = 2/1 x 0.045 / 16.
    assert two.statistic == pytest.approx(0.35 / math.sqrt(2 * 0.045 / 16))


def test_correctness_columns_define_wrong_when_the_table_has_them():
    spec = [("q1", "j", "r", None, 0.8, None), ("q1", "k1", "r", None, 0.4, None),
            ("q2", "j", "r", None, 0.6, None), ("q2", "r", "k1", None, 0.2, None),
            ("q3", "j", "r", None, 0.5, None)]
    correct = {"correct_a": [False, False, False, True, True], "correct_b": [True, True, True, False, True]}
    est = self_preference_eqb(rows(spec, extra=correct), "j")
    # q1: own wrong, vote 0.8; k1 wrong, vote 0.4 -> 0.4. q2: own wrong, vote 0.6; k1 (as B) wrong,
    # vote 1 - 0.2 = 0.8 -> -0.2. q3: both correct, no preferred side. Mean 0.1.
    assert est.value == pytest.approx(0.1) and est.n == 2
    assert dict(est.exclusions) == {"both_or_neither_correct": 1}
    assert est.details["reference"] == "correctness (correct_a, correct_b)"
    with pytest.raises(ValueError, match="column 'correct_b' holds 'yes'"):
        self_preference_eqb(rows(spec, extra={**correct, "correct_b": ["yes"] * 5}), "j")


def test_skip_reasons_say_what_is_missing():
    with pytest.raises(InsufficientData, match="no responses written by the judge in its pairs"):
        self_preference_eqb(rows([("q1", "k1", "r", "b", 0.8, None)]), "j")
    with pytest.raises(InsufficientData, match="prefers the other response over one written by the judge"):
        self_preference_eqb(rows([("q1", "j", "r", "a", 0.8, None), ("q1", "k1", "r", "b", 0.8, None)]), "j")
    with pytest.raises(InsufficientData, match="no comparable pair"):
        self_preference_eqb(rows([("q1", "j", "r", "b", 0.8, None), ("q2", "k1", "r", "b", 0.8, None)]), "j")
    with pytest.raises(ValueError, match="no family given"):
        family_preference_eqb(rows(HAND), "j", None, {})


def test_the_family_form_counts_the_family_as_own():
    # k1 as j's family: its lost pairs are "own" now; k2 stays the baseline.
    spec = [("q1", "k1", "r", "b", 0.9, None), ("q1", "k2", "r", "b", 0.2, None),
            ("q2", "r", "k1", "a", 0.4, None), ("q2", "r", "k2", "a", 0.7, None)]
    est = family_preference_eqb(rows(spec), "j", None, {"j": ["k1"]})
    # q1: 0.9 - 0.2 = 0.7; q2: (1 - 0.4) - (1 - 0.7) = 0.3; mean 0.5.
    assert est.value == pytest.approx(0.5) and est.n == 2
    assert est.method.startswith("toward the family ['j', 'k1']")


def test_analyze_records_it_or_the_reason(tmp_path):
    result = analyze(rows(HAND), reps=50)
    m = result["judges"]["j"]
    assert m["self_preference_eqb"]["value"] == pytest.approx(0.25)
    member = [t for t in m["multiplicity"]["members"] if t["test"] == "self_preference_eqb"]
    assert member and member[0]["p_value"] == pytest.approx(m["self_preference_eqb"]["p_value"])
    other = analyze(rows(HAND, judge="k9"), reps=50)["judges"]["k9"]["skipped"]["self_preference_eqb"]
    assert other.startswith("no responses written by the judge")


def _fig(value, lo, hi, p, n=50):
    return {"value": value, "ci_low": lo, "ci_high": hi, "n": n, "p_value": p}


@pytest.mark.parametrize("eo_p,eqb_p,kind,says", [
    (1e-6, 0.6, "caution", "explained by its competence: on the same questions it votes for its own wrong "
                           "answers no detectably more often"),
    (1e-6, 1e-5, "caution", "beyond its own competence: on the same questions it votes for its own wrong "
                            "answers more often"),
    (0.7, 1e-5, "caution", "no preference for its own outputs detectable against humans"),
    # "ok" before the three verdicts (issue 41 item 3): EO +0.02 [-0.10, +0.14] leaves its +-0.05 margin.
    (0.7, 0.6, "inconclusive", "on the same questions no difference detectable between its votes for its own "
                               "wrong answers and for other models' wrong answers"),
])
def test_the_self_preference_statement_reads_the_baseline(eo_p, eqb_p, kind, says):
    eo = _fig(0.3 if eo_p < 0.05 else 0.02, 0.2 if eo_p < 0.05 else -0.1, 0.4 if eo_p < 0.05 else 0.14, eo_p)
    eqb = _fig(0.2 if eqb_p < 0.05 else 0.03, 0.1 if eqb_p < 0.05 else -0.08, 0.3 if eqb_p < 0.05 else 0.14,
               eqb_p)
    metrics = {"self_preference_eo": eo, "self_preference_eqb": eqb}
    fam = family(metrics)
    assert [t.key for t in declare(metrics)] == ["self_preference_eo", "self_preference_eqb"]
    said = [s for s in trust_summary(metrics, fam=fam) if s[1].startswith("Self-preference")]
    assert len(said) == 1 and said[0][0] == kind, said
    assert says in said[0][1]
    raw = "<0.001" if eqb_p < 0.001 else f"={eqb_p:.3f}"
    figure = f"(EQB {eqb['value']:+.3f} [{eqb['ci_low']:+.3f}, {eqb['ci_high']:+.3f}], n=50 "
    assert figure + f"question-opponent pairs; p{raw}, adjusted " in said[0][1]
    assert ("beyond its own competence" in said[0][1]) == (eqb_p < 0.05)


def test_the_statement_without_eo_rests_on_the_baseline_alone():
    metrics = {"family_preference_eqb": _fig(0.25, 0.1, 0.4, 1e-4)}
    said = trust_summary(metrics)
    assert said == [("caution", said[0][1])]
    assert said[0][1].startswith("Family preference: beyond its own competence: on the same questions it "
                                 "votes for its family's wrong answers more often")
