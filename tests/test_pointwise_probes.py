"""The pointwise probes' pure parts on hand-computed tables: the template variants, reading score
IDs, the unchanged rate and score shift, the config's pointwise checks and the report card's
statements (Holm-adjusted)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from judgebias.backends.protocol import OptionScores


def test_the_rubric_variants_reorder_relabel_and_rescale_the_same_lines():
    from judgebias.prompts.pointwise import HELPFULNESS_RUBRIC, RUBRIC_5
    from judgebias.prompts.pointwise_variants import POINTWISE_PROBES, split_rubric

    head, lines = split_rubric(HELPFULNESS_RUBRIC)
    texts = [d for _, d in lines]

    def rubric_of(name: str) -> list[tuple[str, str]]:
        _, variant = POINTWISE_PROBES[name].templates(RUBRIC_5)
        user = variant.build("Q", "R", "REF").messages[1].content
        rubric = user.split("###Score rubric:\n")[1].split("\n\n###Feedback")[0]
        assert rubric.startswith(head)
        return split_rubric(rubric)[1]

    assert rubric_of("rubric_reversed") == [(str(k), texts[k - 1]) for k in (5, 4, 3, 2, 1)]
    assert rubric_of("rubric_permuted") == [(str(k), texts[k - 1]) for k in (2, 4, 1, 5, 3)]
    assert rubric_of("score_ids_letters") == list(zip("ABCDE", texts, strict=True))
    assert rubric_of("scale_1_10") == list(zip(["1-2", "3-4", "5-6", "7-8", "9-10"], texts, strict=True))
    # The variant's version joins the call's content key; the baseline is the template itself.
    baseline, variant = POINTWISE_PROBES["rubric_reversed"].templates(RUBRIC_5)
    assert baseline is RUBRIC_5 and variant.tag(True) == "rubric-5+rubric_reversed@1+rubric_reversed@1:chat"
    letters = POINTWISE_PROBES["score_ids_letters"].templates(RUBRIC_5)[1]
    assert "a letter score from A to E" in letters.build("Q", "R").messages[0].content
    ten = POINTWISE_PROBES["scale_1_10"].templates(RUBRIC_5)[1]
    assert (ten.scale_min, ten.scale_max) == (1, 10) and "from 1 to 10" in ten.build("Q", "R").messages[
        1
    ].content


def test_the_reference_probe_states_two_scores_for_the_same_reference():
    from judgebias.prompts.pointwise import MTBENCH_SINGLE, RUBRIC_5
    from judgebias.prompts.pointwise_variants import POINTWISE_PROBES

    baseline, variant = POINTWISE_PROBES["reference_score"].templates(RUBRIC_5)
    b, v = (t.build("Q", "R", "THE REF").messages[1].content for t in (baseline, variant))
    assert "###Reference answer (it would score 5):\nTHE REF" in b
    assert "###Reference answer (it would score 2):\nTHE REF" in v
    assert b.replace("score 5)", "score 2)") == v  # nothing else differs
    with pytest.raises(ValueError, match="needs a reference answer"):
        variant.build("Q", "R")
    with pytest.raises(ValueError, match="no 1-5 score rubric"):
        POINTWISE_PROBES["rubric_reversed"].templates(MTBENCH_SINGLE)


def test_to_base_maps_1_10_linearly_onto_1_5():
    from judgebias.prompts.pointwise_variants import POINTWISE_PROBES

    ten, same = POINTWISE_PROBES["scale_1_10"], POINTWISE_PROBES["rubric_reversed"]
    # 1 + (s - 1) * 4 / 9: 1 -> 1, 10 -> 5, 5.5 -> 3, 7 -> 3.667
    assert [ten.to_base(s) for s in (1, 10, 5.5)] == [1.0, 5.0, 3.0]
    assert ten.to_base(7) == pytest.approx(1 + 6 * 4 / 9)
    assert same.to_base(3.7) == pytest.approx(3.7)


def test_letter_ids_are_read_and_valued_by_their_position():
    from judgebias.engine.pointwise import combine, digit_options, find_score
    from judgebias.prompts.pointwise import RUBRIC_5
    from judgebias.prompts.pointwise_variants import POINTWISE_PROBES

    letters = POINTWISE_PROBES["score_ids_letters"].templates(RUBRIC_5)[1]
    assert digit_options(letters) == ("A", "B", "C", "D", "E")
    text = "Feedback: fine. [RESULT] D"
    pos, value, err = find_score(text, "[RESULT]", letters.labels)
    assert err is None and value == 4.0 and text[:pos].endswith("[RESULT]")
    # "Ahead" is no score ID: the bare marker is found, the score left to the probabilities.
    assert find_score("[RESULT] Ahead", "[RESULT]", letters.labels)[1] is None
    probs = {"A": 0.1, "B": 0.2, "C": 0.3, "D": 0.4, "E": 0.0}
    dist, mass, reason = combine(letters, OptionScores(probs=probs, mass=0.9), None)
    assert dist == [0.1, 0.2, 0.3, 0.4, 0.0] and reason is None and mass == 0.9
    assert letters.label_value("E") == 5.0 and letters.label_value("F") is None


def _sides():
    # Baseline on 1-5; the variant on 1-10 (scale_1_10). i4 has no baseline score.
    before = pd.DataFrame(
        {
            "item_id": ["i1", "i2", "i3", "i4"],
            "score": [3.2, 4.0, 2.5, math.nan],
            "score_argmax": [3.0, 4.0, 2.0, math.nan],
        }
    )
    after = pd.DataFrame(
        {
            "item_id": ["i1", "i2", "i3", "i4"],
            "score": [5.5, 10.0, 1.0, 7.0],
            "score_argmax": [5.0, 10.0, 1.0, 7.0],
        }
    )
    return before, after


def test_unchanged_rate_and_score_shift_by_hand():
    from judgebias.metrics.pointwise_probes import probe_scores, score_shift, unchanged_rate
    from judgebias.prompts.pointwise_variants import POINTWISE_PROBES

    before, after = _sides()
    table = probe_scores(
        before, after, judge="j", probe="scale_1_10@1", to_base=POINTWISE_PROBES["scale_1_10"].to_base
    )
    # Mapped variant scores 1 + (s - 1) * 4/9: 5.5 -> 3.0, 10 -> 5.0, 1 -> 1.0, 7 -> 3.667.
    # Mapped levels (argmax, half up): 5 -> 2.778 -> 3, 10 -> 5, 1 -> 1, 7 -> 3.667 -> 4.
    # i4 left out (no baseline). Levels before 3, 4, 2 vs after 3, 5, 1: one unchanged of 3,
    # one up, one down.
    rate = unchanged_rate(table, "j", "scale_1_10@1")
    assert rate.value == pytest.approx(1 / 3) and rate.n == 3
    assert rate.exclusions == {"no_score_before": 1}
    assert (rate.details["moved_up"], rate.details["moved_down"]) == (1, 1)
    # Agresti-Coull (z^2 = 3.841459 added): n~ = 6.841459, p~ = (1 + 1.920729) / 6.841459 = 0.426915,
    # se = sqrt(0.426915 * 0.573085 / 6.841459) = 0.189106, half 1.959964 * 0.189106 = 0.370641
    # -> [0.056274, 0.797556].
    assert (rate.ci_low, rate.ci_high) == pytest.approx((0.056274, 0.797556), abs=1e-5)
    # Shifts 3.0 - 3.2 = -0.2, 5.0 - 4.0 = 1.0, 1.0 - 2.5 = -1.5: mean -0.7 / 3 = -0.233333;
    # sd = sqrt((0.033333^2 + 1.233333^2 + 1.266667^2) / 2) = sqrt(3.126667 / 2) = 1.250333,
    # se = 1.250333 / sqrt(3) = 0.721880; t(0.975, 2) = 4.302653 -> half 3.106000;
    # t = -0.233333 / 0.721880 = -0.323230.
    shift = score_shift(table, "j", "scale_1_10@1")
    assert shift.value == pytest.approx(-0.233333, abs=1e-6) and shift.n == 3
    assert (shift.ci_low, shift.ci_high) == pytest.approx((-3.339333, 2.872667), abs=1e-5)
    assert shift.statistic == pytest.approx(-0.323230, abs=1e-5) and 0.7 < shift.p_value < 0.8


def test_probe_figures_name_bad_input_and_empty_populations():
    from judgebias.metrics.pointwise_probes import probe_scores, score_shift, unchanged_rate
    from judgebias.stats import InsufficientData

    before, after = _sides()
    with pytest.raises(ValueError, match="before table has no column"):
        probe_scores(before.drop(columns="score"), after, judge="j", probe="p")
    table = probe_scores(before, after, judge="j", probe="p")
    with pytest.raises(ValueError, match="no rows for judge 'k'"):
        unchanged_rate(table, "k", "p")
    with pytest.raises(ValueError, match="item 'i1' appears twice"):
        score_shift(pd.concat([table, table.head(1)]), "j", "p")
    with pytest.raises(InsufficientData, match="no item scored under both"):
        score_shift(table[table["item_id"] == "i4"], "j", "p")


def _config(**judge):
    from judgebias.config.experiment import ConfigError, parse_config

    doc = {
        "generators": [{"name": "g1", "model": "m1"}, {"name": "g2", "model": "m2"}],
        "judges": [
            {"name": "g1", "model": "m1"},
            {"name": "p", "model": "m1", "mode": "pointwise", "template": "rubric-5", **judge},
        ],
    }
    try:
        return parse_config(doc), []
    except ConfigError as exc:
        return None, exc.problems


def test_the_config_checks_a_pointwise_judge_field_by_field():
    cfg, problems = _config(scale=[1, 5])
    assert (
        not problems and [j.name for j in cfg.pointwise_judges()] == ["p"] and cfg.pairwise_twin("p") == "g1"
    )
    assert _config(scale=[1, 10])[1] == [
        "judges[1].scale: template 'rubric-5' scores 1..5, not 1..10 (set the scale of the template, "
        "or leave scale out)"
    ]
    assert _config(template="dbg-ab")[1][0].startswith(
        "judges[1].template: 'dbg-ab' is not a pointwise template"
    )
    assert _config(template="rubric-5-ref")[1][0].startswith(
        "judges[1].template: 'rubric-5-ref' needs a reference"
    )
    assert _config(prompt_kind="few-shot")[1][0].startswith("judges[1].prompt_kind: the pointwise templates")
    assert _config(max_new_tokens=64)[1] == []
    assert _config(mode="pairwise", template="dbg-ab", max_new_tokens=64)[1] == [
        "judges[1].max_new_tokens: only applies to mode 'pointwise'"
    ]
    assert _config(mode="pairwise")[1][0].startswith(
        "judges[1].template: unknown judge template 'rubric-5' (a pointwise template: set mode: pointwise)"
    )


def test_a_pointwise_judge_keeps_the_main_hash_and_has_its_own():
    from judgebias.config.experiment import ConfigError, parse_config

    base = {
        "generators": [{"name": "g1", "model": "m1"}, {"name": "g2", "model": "m2"}],
        "judges": [{"name": "g1", "model": "m1"}],
    }
    with_pw = {
        **base,
        "judges": [
            *base["judges"],
            {"name": "p", "model": "m1", "mode": "pointwise", "template": "rubric-5-direct"},
        ],
    }
    a, b = parse_config(base), parse_config(with_pw)
    assert a.config_hash() == b.config_hash()
    other = {**with_pw, "judges": [*base["judges"], {**with_pw["judges"][1], "template": "rubric-5"}]}
    assert parse_config(other).pointwise_hash() != b.pointwise_hash()
    with pytest.raises(ConfigError) as exc:
        parse_config(
            {
                **with_pw,
                "judges": with_pw["judges"][1:],
                "gold": {"panel": ["p"]},
                "probes": {"pointwise": {"names": ["rubric_reversed"]}},
            }
        )
    assert "judges: every judge has mode 'pointwise'" in str(exc.value)
    assert "gold.panel[0]: judge 'p' is pointwise" in str(exc.value)
    with pytest.raises(ConfigError, match=r"probes\.pointwise: the pointwise probes vary a rubric"):
        parse_config({**base, "probes": {"pointwise": {}}})
    with pytest.raises(ConfigError, match=r"probes.pointwise.names: unknown pointwise probe\(s\) \['nope'\]"):
        parse_config({**with_pw, "probes": {"pointwise": {"names": ["nope"]}}})


def test_pointwise_statements_by_hand():
    from judgebias.reporting.trust_pointwise import pointwise_statements

    # Four tests (Holm): bias 0.001, self-preference 0.2, reversed 0.004, letters 0.5. Sorted:
    # 4 * 0.001 = 0.004, 3 * 0.004 = 0.012, 2 * 0.2 = 0.4, 1 * 0.5 = 0.5 -> bias and reversed reject.
    figures = {
        "score_bias_human": {"value": 0.8, "ci_low": 0.4, "ci_high": 1.2, "n": 30, "p_value": 0.001},
        "score_self_preference": {
            "eo": {"value": 0.2, "ci_low": -0.1, "ci_high": 0.5, "n": 30, "p_value": 0.2}
        },
    }
    shift = {"value": -0.3, "ci_low": -0.5, "ci_high": -0.1, "n": 30, "p_value": 0.004}
    probes = {
        "probes": {
            "rubric_reversed@1": {"description": "the rubric listed from Score 5 down"},
            "score_ids_letters@1": {"description": "scores written A-E"},
        },
        "judges": {
            "j": {
                "rubric_reversed@1": {"score_shift": shift, "unchanged_rate": {"value": 0.6, "n": 30}},
                "score_ids_letters@1": {"score_shift": {**shift, "value": 0.01, "p_value": 0.5}},
            }
        },
    }
    said, fam = pointwise_statements(figures, probes, "j")
    assert fam.size == 4 and fam.p("pwprobe:rubric_reversed@1") == pytest.approx((0.004, 0.012))
    kinds = [k for k, _ in said]
    # Changed by issue 41 item 3: a test that does not reject is no longer "ok". These figures carry
    # no score_distribution, so the scale (and a 5%-of-scale margin) is unknown: nothing can be shown
    # equivalent, and the self-preference and the letters probe read inconclusive.
    assert kinds == ["caution", "inconclusive", "caution", "inconclusive"]
    assert said[0][1].startswith(
        "Against human scores: scores higher than the humans (+0.800 [+0.400, +1.200]"
    )
    assert "adjusted 0.004" in said[0][1]
    assert said[1][1].startswith("No score preference for its own responses detectable, but one as large as "
                                 "+0.500 is not excluded")
    assert "the rubric listed from Score 5 down (lower, shift -0.300" in said[2][1]
    assert "60.0% unchanged" in said[2][1] and "A-E" not in said[2][1]
    # The same shift at p = 0.02 passes alone, not after Holm (3 * 0.02 = 0.06): no caution.
    weaker = {
        **probes,
        "judges": {
            "j": {**probes["judges"]["j"], "rubric_reversed@1": {"score_shift": {**shift, "p_value": 0.02}}}
        },
    }
    said, _ = pointwise_statements(figures, weaker, "j")
    # Was "ok: None of the 2 scoring perturbations ... moved its scores detectably" before issue 41.
    assert said[-1][0] == "inconclusive" and "cannot yet call harmless (2 of 2)" in said[-1][1]
    # On a 1-5 scale (range 4, margin 0.05 x 4 = 0.2), a bias of +0.02 [-0.05, +0.09] on 200
    # responses is inside +-0.2: equivalence p = 2 sf((0.2 - 0.02) / (0.07 / Z)) = 2 sf(5.04) ~ 5e-7: ok.
    calm = {"score_bias_human": {"value": 0.02, "ci_low": -0.05, "ci_high": 0.09, "n": 200, "p_value": 0.6},
            "score_distribution": {"value": 0.1, "ci_low": -0.2, "ci_high": 0.4, "n": 200, "levels": 5}}
    said, fam = pointwise_statements(calm, None, "j")
    assert said == [("ok", "Against human scores: no difference from the humans' mean score beyond its "
                           "margin +-0.200 (+0.020 [-0.050, +0.090], n=200; p=0.600, adjusted 0.600).")]
    assert pointwise_statements({}, None, "j")[0] == []
