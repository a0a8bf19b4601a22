"""The recommendation's rules (judgebias.metrics.recommend) on hand-made profiles, and the planner's
arithmetic by hand."""

from __future__ import annotations

import numpy as np
import pytest

from judgebias.metrics import recommend as rec


def est(value, low=None, high=None, n=100):
    return {"value": value, "ci_low": low, "ci_high": high, "n": n}


def judge(name, *, related=None, kappa=est(0.5, 0.4, 0.6), pc=est(0.95, 0.93, 0.97), vb=None,
          length=None, tau=None, seconds=None):
    audit = {"kappa_human": kappa, "position_consistency": pc, "verbosity_bias": vb}
    timing = {"seconds_per_1000": seconds, "source": "test"} if seconds is not None else None
    return rec.profile(name, related=related or {}, audit=audit, length_term=length, tau=tau, timing=timing)


def outcomes(p):
    return {c["rule"]: c["outcome"] for c in rec.checks(p)}


def test_each_rule_at_its_boundary():
    # R1: a family relative among the candidates excludes the judge; an empty list does not count.
    assert outcomes(judge("j", related={"family": ["llama-7b"], "self": []}))["R1"] == "excluded"
    assert outcomes(judge("j", related={"self": []}))["R1"] == "passed"
    # R2: kappa's lower end at exactly 0 is chance (excluded); 0.01 above it passes.
    assert outcomes(judge("j", kappa=est(0.1, 0.0, 0.2)))["R2"] == "excluded"
    assert outcomes(judge("j", kappa=est(0.1, 0.01, 0.2)))["R2"] == "passed"
    assert outcomes(judge("j", kappa=None))["R2"] == "not applicable"
    # R3: 0.9 is consistent enough, 0.89 is flagged.
    assert outcomes(judge("j", pc=est(0.9, 0.85, 0.95)))["R3"] == "passed"
    assert outcomes(judge("j", pc=est(0.89, 0.85, 0.93)))["R3"] == "flagged"
    # R4 with humans reads the verbosity bias (above 0 flags, even when the length term alone would
    # not; the length term is not read when humans are there: they may prefer length as much).
    assert outcomes(judge("j", vb=est(0.1, 0.02, 0.18)))["R4"] == "flagged"
    # Changed by issue 41 item 3: an interval spanning 0 no longer passes by itself. It passes only
    # inside the verbosity bias's margin +-0.05, else it is inconclusive.
    assert outcomes(judge("j", vb=est(0.1, -0.02, 0.18), length=est(0.6, 0.3, 0.9)))["R4"] == "inconclusive"
    # 0.01 [-0.02, +0.04]: equivalence p = 2 sf((0.05 - 0.01) / (0.03 / 1.96)) = 0.009 < 0.05: passed.
    assert outcomes(judge("j", vb=est(0.01, -0.02, 0.04), length=est(0.6, 0.3, 0.9)))["R4"] == "passed"
    # Without humans, a length term excluding 0 on either side flags; spanning 0 it passes only
    # inside +-0.2 (+0.3 [-0.1, +0.5] was "passed" before issue 41).
    assert outcomes(judge("j", length=est(-0.3, -0.5, -0.1)))["R4"] == "flagged"
    assert outcomes(judge("j", length=est(0.3, -0.1, 0.5)))["R4"] == "inconclusive"
    assert outcomes(judge("j", length=est(0.02, -0.1, 0.14)))["R4"] == "passed"


def test_the_panel_meets_the_same_rules_as_its_members():
    # Issue 41: the panel is checked against R2-R4 on its pooled vote (it was "not applicable"
    # before); R1 holds by construction. Without its audit figures, R2-R4 are not applicable.
    p = rec.profile(rec.PANEL, tau=est(0.6, 0.2, 1.0, 5))
    assert outcomes(p) == {"R1": "passed", "R2": "not applicable", "R3": "not applicable",
                           "R4": "not applicable"}
    assert rec.choose([p])["recommended"] == rec.PANEL
    wordy = rec.profile(rec.PANEL, tau=est(0.6, 0.2, 1.0, 5),
                        audit={"kappa_human": est(0.4, 0.3, 0.5), "verbosity_bias": est(0.06, 0.01, 0.12)})
    out = rec.choose([wordy, judge("j", tau=est(0.6, 0.2, 1.0, 5), vb=est(0.0, -0.02, 0.02))])
    assert outcomes(wordy)["R4"] == "flagged" and out["raters"]["panel"]["flags"] == ["R4"]
    # Same tau: the unflagged judge comes before the flagged panel; a flagged panel is read as a panel.
    assert out["order"] == ["j", "panel"]
    assert rec.choose([wordy])["read_variant"] == "panel"


def test_order_tau_then_flags_then_panel_then_time():
    a = judge("a", tau=est(0.6, 0.2, 1.0, 5))
    b = judge("b", tau=est(0.8, 0.4, 1.0, 5), pc=est(0.8, 0.7, 0.9))  # higher tau wins despite R3's flag
    assert rec.choose([a, b])["order"] == ["b", "a"]
    c = judge("c", tau=est(0.8, 0.4, 1.0, 5))  # same tau as b, no flag
    assert rec.choose([a, b, c])["order"] == ["c", "b", "a"]
    panel = rec.profile(rec.PANEL, tau=est(0.8, 0.4, 1.0, 5))  # ties c on tau and flags: panel first
    assert rec.choose([a, b, c, panel])["order"] == ["panel", "c", "b", "a"]
    fast, slow = judge("y", seconds=10.0), judge("x", seconds=20.0)  # no humans: time, then name
    assert rec.choose([slow, fast])["order"] == ["y", "x"]
    assert rec.choose([judge("x"), judge("w")])["order"] == ["w", "x"]
    # A known tau beats an unknown one.
    assert rec.choose([judge("z", tau=est(-0.2, -0.6, 0.2, 5)), judge("a")])["order"] == ["z", "a"]


def test_an_excluded_judge_is_never_recommended_and_a_flag_picks_the_style_ranking():
    related = judge("r", related={"self": ["r-gen"]}, tau=est(1.0, 1.0, 1.0, 5))
    chance = judge("k", kappa=est(0.05, -0.02, 0.12), tau=est(1.0, 1.0, 1.0, 5))
    out = rec.choose([related, chance])
    assert out["recommended"] is None and out["order"] == []
    assert not out["raters"]["r"]["eligible"] and not out["raters"]["k"]["eligible"]
    wordy = judge("v", vb=est(0.1, 0.05, 0.15))
    out = rec.choose([related, wordy])
    assert (out["recommended"], out["read_variant"], out["raters"]["v"]["flags"]) == ("v", "style", ["R4"])
    assert out["rules"] == rec.RULES


def test_top_two_and_their_gap_by_hand():
    models = ["a", "b", "c"]
    assert rec.top_two(np.array([0.2, 0.5, -0.7]), models) == ("b", "a")
    assert rec.top_two(np.array([0.5, 0.5, -1.0]), models) == ("a", "b")  # a tie: by name
    # b - a over two resamples: 0.1 and 0.5; numpy's linear quantiles: 0.1 + 0.025 * 0.4 = 0.11 and
    # 0.1 + 0.975 * 0.4 = 0.49, half-width (0.49 - 0.11) / 2 = 0.19; the point gap 0.5 - 0.2 = 0.3.
    boot = np.array([[0.3, 0.4, -0.7], [0.0, 0.5, -0.5]])
    g = rec.gap("b", "a", np.array([0.2, 0.5, -0.7]), boot, models)
    assert g["value"] == pytest.approx(0.3)
    assert (g["ci_low"], g["ci_high"], g["half_width"]) == pytest.approx((0.11, 0.49, 0.19))
    with pytest.raises(ValueError, match="not ranked"):
        rec.gap("b", "z", np.zeros(3), boot, models)


def test_labels_for_the_gap_by_hand():
    # Half-width 0.2 at 100 labels: per-label variance s2 = 100 (0.2 / 1.95996)^2 = 1.04127.
    # Target 0.2 on a huge pool: n = (t / 1.95996)^2 * 100 with t on n - 1 df; at n = 103, t(102) =
    # 1.98350 gives 102.42 -> 103 (the fixed point). Target 0.1: t(402) = 1.96588 gives 402.42 -> 403.
    g = {"value": 0.2, "half_width": 0.2}
    plan = rec.labels_for_gap(g, 100, 10**9)
    assert plan["per_label_variance"] == pytest.approx(1.041271, rel=1e-5)
    assert (plan["target_half_width"], plan["labels_needed"]) == (0.2, 103)
    assert rec.labels_for_gap(g, 100, 10**9, 0.1)["labels_needed"] == 403
    # A pool of 200 comparisons: n0 / (1 + n0 / 200) with n0 ~ 407 -> 135 (fewer than the pool).
    small = rec.labels_for_gap(g, 100, 200, 0.1)
    assert small["labels_needed"] == 135 and not small["every_comparison"]
    with pytest.raises(ValueError, match="tied"):
        rec.labels_for_gap({"value": 0.0, "half_width": 0.2}, 100, 1000)
    with pytest.raises(ValueError, match="no variance"):
        rec.labels_for_gap({"value": 0.3, "half_width": 0.0}, 100, 1000)


def test_judging_time_is_measured_only_from_uncached_calls(tmp_path):
    from judgebias.runs.store import RunStore
    from judgebias.stages.leaderboard import judging_time

    store = RunStore(tmp_path)
    # 40 pairs in both orders in 12 s: 1000 * 12 / 40 = 300 s per 1,000 judgments.
    store.record_stage("judge_pairs[a]", 12.0, rows=40, calls=80, hits=0)
    store.record_stage("judge_pairs[b]", 0.5, rows=40, calls=2, hits=78)  # mostly from the call cache
    # An API judge with a price: $0.02 for 40 pairs = $0.50 per 1,000.
    store.record_stage("judge_pairs[d]", 4.0, rows=40, calls=80, hits=0,
                       usage={"prompt_tokens": 32000, "completion_tokens": 80, "usd": 0.02})
    out = judging_time(store, ["a", "b", "c", "d"])
    assert set(out) == {"a", "d"} and out["a"]["seconds_per_1000"] == pytest.approx(300.0)
    assert "40 pairs" in out["a"]["source"] and out["a"]["usd_per_1000"] is None
    assert out["d"]["usd_per_1000"] == pytest.approx(0.5)
    from judgebias.tracking.experiment import _usage_metrics

    assert _usage_metrics(store) == {"usage.judge_pairs.d.prompt_tokens": 32000.0,
                                     "usage.judge_pairs.d.completion_tokens": 80.0,
                                     "usage.judge_pairs.d.usd": 0.02}


def test_timing_option_parsing():
    from judgebias.cli.leaderboard import parse_timing

    assert parse_timing(["j=40:1.5", "panel=80"]) == {
        "j": {"seconds_per_1000": 40.0, "usd_per_1000": 1.5, "source": "given with --timing"},
        "panel": {"seconds_per_1000": 80.0, "usd_per_1000": None, "source": "given with --timing"}}
    for bad in ("j", "=4", "j=x", "j=-1", "j=inf", "j=4:nan"):
        with pytest.raises(ValueError, match="RATER=SECONDS"):
            parse_timing([bad])


def test_the_panel_table_pools_the_unrelated_judges_votes():
    import pandas as pd

    from judgebias.reporting.recommendation import panel_table
    from judgebias.tables.pairwise import validate

    # p1 (m1 vs m2): both judges vote, P(A) 0.8 and 0.4 -> the panel's P(A) = (0.8 + 0.4) / 2 = 0.6,
    # per order (0.9 + 0.5) / 2 = 0.7 and (0.7 + 0.3) / 2 = 0.5. p2 (g1 vs m2): j1 wrote g1, so only
    # j2's 0.3 is pooled (its orders 0.2 and 0.4).
    rows = [("p1", "m1", "m2", "j1", 0.9, 0.7), ("p1", "m1", "m2", "j2", 0.5, 0.3),
            ("p2", "g1", "m2", "j1", 0.9, 0.9), ("p2", "g1", "m2", "j2", 0.2, 0.4)]
    df = pd.DataFrame([{"pair_id": p, "prompt": f"q {p}", "response_a": "x", "response_b": "y",
                        "generator_a": a, "generator_b": b, "judge": j, "p_a_ab": ab, "p_a_ba": ba,
                        "p_a": (ab + ba) / 2, "human": ["a"]} for p, a, b, j, ab, ba in rows])
    table = validate(df)[0]
    related = {"j1": frozenset({"g1"}), "j2": frozenset()}
    panel = panel_table(table, ["j1", "j2"], related).set_index("pair_id")
    assert panel.loc["p1", "p_a"] == pytest.approx(0.6) and panel.loc["p2", "p_a"] == pytest.approx(0.3)
    assert panel.loc["p1", "p_a_ab"] == pytest.approx(0.7) and panel.loc["p1", "p_a_ba"] == pytest.approx(0.5)
    assert panel.loc["p2", "p_a_ab"] == pytest.approx(0.2) and set(panel["judge"]) == {rec.PANEL}


def test_r4_reads_the_margins_given():
    # +0.03 [-0.01, +0.07]: not inside +-0.05 (0.07 > 0.05): inconclusive; inside +-0.1: passed.
    p = judge("j", vb=est(0.03, -0.01, 0.07))
    assert outcomes(p)["R4"] == "inconclusive"
    wide = rec.with_margins({"verbosity_bias": 0.1})
    out = rec.choose([p], wide)
    assert out["raters"]["j"]["checks"][3]["outcome"] == "passed"
    assert out["margins"] == {"verbosity_bias": 0.1, "style_length_term": 0.2}
    assert "verbosity bias +-0.1," in out["rules"]["R4"]
    with pytest.raises(ValueError, match="no margin for dbg"):
        rec.with_margins({"dbg": 0.1})
