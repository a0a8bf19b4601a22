"""Perturbation probes (CALM): deterministic templates that touch one side only, and the robustness
figures on hand-computed tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from judgebias.metrics.robustness import perturbation_shift, robustness_rate
from judgebias.probes.perturbations import PERTURBATIONS, perturb_pairs, perturbation

PAIRS = pd.DataFrame({
    "pair_id": [f"p{i}" for i in range(40)],
    "prompt": [f"Question {i}?" for i in range(40)],
    "response_a": [f"Answer A to {i}. It has two sentences." for i in range(40)],
    "response_b": [f"Answer B to {i}! Short." for i in range(40)],
    "generator_a": "g1", "generator_b": "g2",
})


@pytest.mark.parametrize("name", list(PERTURBATIONS))
def test_perturbation_is_deterministic_and_touches_one_side_only(name):
    p = perturbation(name)
    out = perturb_pairs(PAIRS, p, seed=7)
    assert out.equals(perturb_pairs(PAIRS, p, seed=7))  # same seed, same table
    assert not out.equals(perturb_pairs(PAIRS, p, seed=8))  # the seed draws sides and wordings
    assert set(out["perturbed_side"]) == {"a", "b"}  # 40 pairs: both sides get perturbed
    for orig, new in zip(PAIRS.to_dict("records"), out.to_dict("records"), strict=True):
        side, other = new["perturbed_side"], "b" if new["perturbed_side"] == "a" else "a"
        assert new[f"response_{other}"] == orig[f"response_{other}"]  # byte for byte
        assert new[f"response_{side}"] != orig[f"response_{side}"]
        assert new["prompt"] == orig["prompt"] and new["generator_a"] == orig["generator_a"]
        assert new["pair_id"] == f"{orig['pair_id']}~{p.tag}" and new["source_pair_id"] == orig["pair_id"]
        # the original text survives inside the perturbed one (nothing of it is removed)
        assert orig[f"response_{side}"].strip() in new[f"response_{side}"]


def test_wordings_and_their_content():
    pairs = PAIRS.head(1)
    out = perturb_pairs(pairs, perturbation("verbosity"), seed=0).iloc[0]
    side = out["perturbed_side"]
    first = {"a": "Answer A to 0.", "b": "Answer B to 0!"}[side]
    assert first in out[f"response_{side}"].split("\n\n")[1]  # restates, adds no new fact
    out = perturb_pairs(pairs, perturbation("sentiment_hostile"), seed=0).iloc[0]
    column = f"response_{out['perturbed_side']}"
    assert out[column].count(pairs.iloc[0][column]) == 1
    assert perturbation("authority").tag == "authority@1"
    with pytest.raises(ValueError, match="unknown perturbation 'nope'"):
        perturbation("nope")
    empty = PAIRS.head(2).assign(response_a="  ", response_b="  ")
    with pytest.raises(ValueError, match=r"pair 'p0'.*empty"):
        perturb_pairs(empty, perturbation("authority"))


# One judge, one perturbation. p_a before -> after, the perturbed side, and what that does:
#   p1 side a: a -> a   0.70 -> 0.80   P(side) +0.10   unchanged
#   p2 side b: a -> b   0.60 -> 0.30   P(side) 0.40 -> 0.70 = +0.30   changed toward the perturbed side
#   p3 side a: a -> b   0.55 -> 0.45   P(side) -0.10   changed away from it
#   p4 side b: tie->tie 0.50 -> 0.50   0.00            unchanged
#   p5 side a: none -> a, no probability before          excluded from both
TABLE = pd.DataFrame({
    "judge": "j", "perturbation": "authority@1",
    "pair_id": ["p1", "p2", "p3", "p4", "p5"],
    "perturbed_side": ["a", "b", "a", "b", "a"],
    "verdict_before": ["a", "a", "a", "tie", None],
    "verdict_after": ["a", "b", "b", "tie", "a"],
    "p_a_before": [0.70, 0.60, 0.55, 0.50, math.nan],
    "p_a_after": [0.80, 0.30, 0.45, 0.50, 0.90],
})


def test_robustness_rate_by_hand():
    est = robustness_rate(TABLE, "j", "authority@1")
    assert est.value == pytest.approx(2 / 4) and est.n == 4  # p1, p4 unchanged of p1-p4
    assert est.exclusions == {"no_verdict_before": 1}
    assert est.details["changed_toward_perturbed"] == 1 and est.details["changed_away_from_perturbed"] == 1
    assert est.ci_low < 0.5 < est.ci_high


def test_shift_by_hand():
    est = perturbation_shift(TABLE, "j", "authority@1")
    # shifts +0.10, +0.30, -0.10, 0.00: mean 0.075; deviations .025, .225, -.175, -.075 -> squares sum
    # .0875, sd = sqrt(.0875 / 3) = .17078, se = .08539, t = .075 / .08539 = .878 (3 df)
    assert est.value == pytest.approx(0.075) and est.n == 4
    assert est.statistic == pytest.approx(0.878, abs=1e-3)
    assert est.details["scale"] == "probability"
    # verdict-only: votes 1 -> 1 (0), side b 0 -> 1 (+1), 1 -> 0 (-1), tie -> tie (0): mean 0
    votes = perturbation_shift(TABLE.drop(columns=["p_a_before", "p_a_after"]), "j", "authority@1")
    assert votes.value == pytest.approx(0.0) and votes.n == 4 and votes.details["scale"] == "vote"


def test_bad_probe_tables_name_the_problem():
    with pytest.raises(ValueError, match="missing column"):
        robustness_rate(TABLE.drop(columns=["perturbed_side"]), "j", "authority@1")
    with pytest.raises(ValueError, match="row 0: perturbed_side"):
        robustness_rate(TABLE.assign(perturbed_side="left"), "j", "authority@1")
    with pytest.raises(ValueError, match="no rows for judge 'k'"):
        perturbation_shift(TABLE, "k", "authority@1")
    with pytest.raises(ValueError, match="appears twice"):
        robustness_rate(pd.concat([TABLE, TABLE]), "j", "authority@1")
    with pytest.raises(ValueError, match="verdict_after must be"):
        robustness_rate(TABLE.assign(verdict_after="A!"), "j", "authority@1")


# Self-recognition. p_a = P("A is the one I wrote"), both orders averaged; own = P(own is mine):
#   r1 j|o  p_a .80 -> own .80 correct    judged p_a .90 -> picks own with .90
#   r2 o|j  p_a .30 -> own .70 correct    judged p_a .20 -> .80
#   r3 j|o  p_a .40 -> own .40 wrong      judged p_a .60 -> .60
#   r4 o|j  p_a .50 -> own .50 undecided  judged p_a .50 -> .50
#   r5 j|o  p_a .60 -> own .60 correct    judged p_a .45 -> .45
#   r6 o|j  p_a .55 -> own .45 wrong      judged p_a .30 -> .70
#   r7 o|x  no own response: not a recognition pair
def _recog(p_a):
    return pd.DataFrame({"pair_id": [f"r{i}" for i in range(1, 8)], "judge": "j",
                         "generator_a": ["j", "o", "j", "o", "j", "o", "o"],
                         "generator_b": ["o", "j", "o", "j", "o", "j", "x"], "p_a": p_a})


RECOG = _recog([0.80, 0.30, 0.40, 0.50, 0.60, 0.55, 0.90])
JUDGED = _recog([0.90, 0.20, 0.60, 0.50, 0.45, 0.30, 0.10])


def test_self_recognition_by_hand():
    from judgebias.metrics.recognition import self_recognition

    est = self_recognition(RECOG, "j")
    # decided pairs r1, r2, r3, r5, r6: correct r1, r2, r5 -> 3 / 5; r4 undecided
    assert est.value == pytest.approx(3 / 5) and est.n == 5 and est.exclusions == {"undecided": 1}
    # mean confidence over r1-r6: (.8 + .7 + .4 + .5 + .6 + .45) / 6 = 3.45 / 6 = .575
    assert est.details["mean_confidence"]["value"] == pytest.approx(0.575)
    assert est.details["mean_confidence"]["n"] == 6


def test_recognition_and_preference_by_hand():
    from judgebias.metrics.recognition import recognition_preference

    est = recognition_preference(RECOG, JUDGED, "j")
    x = [0.80, 0.70, 0.40, 0.50, 0.60, 0.45]  # recognition confidence, r1-r6
    y = [0.90, 0.80, 0.60, 0.50, 0.45, 0.70]  # preference for the own response
    # means .575 and 3.95 / 6 = .658333; deviations of x: .225 .125 -.175 -.075 .025 -.125 (sum 0, so
    # Sxy = sum dx * y) = .2025 + .1 - .105 - .0375 + .01125 - .0875 = .08375
    # Sxx = .050625 + .015625 + .030625 + .005625 + .000625 + .015625 = .11875
    # Syy = sum y^2 - 3.95^2 / 6 = (.81 + .64 + .36 + .25 + .2025 + .49) - 2.600417 = .152083
    # r = .08375 / sqrt(.11875 * .152083) = .6232
    assert est.value == pytest.approx(0.08375 / math.sqrt(0.11875 * (2.7525 - 3.95**2 / 6)))
    assert est.n == 6 and len(x) == len(y)
    # Fisher z: atanh(r) -+ 1.96 / sqrt(6 - 3)
    z = math.atanh(est.value)
    assert est.ci_low == pytest.approx(math.tanh(z - 1.959964 / math.sqrt(3)), abs=1e-6)
    assert "coef" in est.details["logit_picks_own_on_confidence"]  # picks own: r1, r2, r3, r6
    with pytest.raises(ValueError, match="judge 'k' has no rows"):
        recognition_preference(RECOG, JUDGED, "k")


def test_recognition_logit_on_separated_pairs_says_so_in_the_figure(recwarn):
    from judgebias.metrics.recognition import recognition_preference

    # own confidence x: .80 .70 .40 .50 .60 .35; own preference y: .90 .80 .40 .50 .70 .40, so the
    # judge picks its own (y > .5) exactly on r1, r2, r5, the pairs with x > .55: perfectly separated,
    # the logistic slope is unbounded. The figure must say so; no library warning reaches the console.
    est = recognition_preference(_recog([0.80, 0.30, 0.40, 0.50, 0.60, 0.65, 0.90]),
                                 _recog([0.90, 0.20, 0.40, 0.50, 0.70, 0.60, 0.10]), "j")
    fit = est.details["logit_picks_own_on_confidence"]
    assert "not estimable" in fit["note"] or "do not trust" in fit["note"]
    assert not [w for w in recwarn if "statsmodels" in (w.filename or "") or "Separation" in str(w.category)
                or "Convergence" in str(w.category)]
