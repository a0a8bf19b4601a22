"""Three-way statements (issue 41 item 3): caution when the adjusted test rejects 0, ok only when the
95% interval lies inside the figure's margin of practical irrelevance (equivalence adjusted in the
same family), inconclusive otherwise, saying the effect the data cannot exclude. Hand-computed
tables; the arithmetic is in the comments (Z = 1.95996)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from scipy.stats import norm
from typer.testing import CliRunner

from judgebias.metrics import margins as M
from judgebias.metrics import registry as R
from judgebias.reporting.trust import family, probe_statements, statements, trust_summary

Z = 1.959963984540054


def _est(value, lo, hi, n=100, **extra):
    return {"value": value, "ci_low": lo, "ci_high": hi, "n": n, **extra}


def test_equivalence_p_is_the_95_interval_inside_the_margin():
    # 0.01 [-0.02, +0.04], margin 0.05: se below = 0.03 / Z, above = 0.03 / Z.
    # lower test: (0.01 + 0.05) / 0.0153 = 3.92 -> 4.4e-5; upper: (0.05 - 0.01) / 0.0153 = 2.613
    # -> 0.00448; p = 2 x max = 0.00897.
    p = M.equivalence_p(_est(0.01, -0.02, 0.04), 0.05)
    assert p == pytest.approx(2 * norm.sf(0.04 / (0.03 / Z)))
    assert p == pytest.approx(0.00897, abs=1e-5)
    # An interval ending exactly on the margin: each side z = 1.96, p = 2 x 0.025 = 0.05 (not < 0.05).
    assert M.equivalence_p(_est(0.0, -0.05, 0.05), 0.05) == pytest.approx(0.05)
    # P(first shown wins) 0.51 [0.49, 0.53] against 0.5 +- 0.03: the upper side is 0.02 from 0.53
    # with a half-width of 0.02, z = 1.96 -> p = 0.05 again: the interval touches the band.
    assert M.equivalence_p(_est(0.51, 0.49, 0.53), 0.03, null=0.5) == pytest.approx(0.05)
    # Non-inferiority (human ceiling gap): only the lower side counts. -0.01 [-0.04, +0.02] against
    # -0.05: (-0.01 + 0.05) / (0.03 / Z) = 2.613 -> 2 x 0.00448 = 0.00897.
    assert M.equivalence_p(_est(-0.01, -0.04, 0.02), 0.05, sides=M.LOWER) == pytest.approx(0.00897, abs=1e-5)
    # No interval: nothing shown.
    assert M.equivalence_p({"value": 0.0, "ci_low": None, "ci_high": None, "n": 3}, 0.05) == 1.0


def test_a_zero_width_interval_is_widened_to_the_rule_of_three():
    # 8 probe pairs, none moved: [0, 0] shows no spread, not no effect: +-3/8 = +-0.375, so the
    # upper test is 0.05 / (0.375 / Z) = 0.261 -> p = 2 x 0.397 = 0.794. From 100 pairs: +-0.03,
    # 0.05 / (0.03 / Z) = 3.27 -> 2 x 0.000544 = 0.00109.
    assert M.equivalence_p(_est(0.0, 0.0, 0.0, 8), 0.05) == pytest.approx(2 * norm.sf(0.05 / (0.375 / Z)))
    assert M.equivalence_p(_est(0.0, 0.0, 0.0, 100), 0.05) == pytest.approx(0.00109, abs=1e-5)
    assert abs(M.not_excluded(_est(0.0, 0.0, 0.0, 8))) == pytest.approx(0.375)  # a tie: either end


def test_not_excluded_and_the_units_that_would_settle_it():
    # The bundled PandaLM family EO, rounded: +0.028 [-0.068, +0.141]: the end farther from 0 is +0.141.
    assert M.not_excluded(_est(0.028, -0.068, 0.141)) == 0.141
    assert M.not_excluded(_est(0.51, 0.40, 0.58), null=0.5) == 0.40
    assert M.not_excluded(_est(-0.01, -0.07, 0.02), sides=M.LOWER) == -0.07
    # +0.03 [-0.07, +0.13] on n = 324: half-width 0.1; settled once the half-width is
    # max(|d|, margin - |d|) = max(0.03, 0.02) = 0.03 (the interval then excludes 0).
    # s2 = 324 (0.1 / Z)^2; n = t^2 s2 / 0.03^2 = 324 (0.1 / 0.03)^2 (t / Z)^2 = 3600 x
    # (1.96063 / 1.95996)^2 = 3602.5 -> 3603 (t on 3602 df; the finite-population term of 1e9 is nil).
    plan = M.to_settle(_est(0.03, -0.07, 0.13, 324), 0.05)
    assert plan["n_needed"] == 3603 and plan["more"] == 3603 - 324
    assert plan["target_half_width"] == pytest.approx(0.03) and plan["half_width"] == pytest.approx(0.1)
    # Centred on 0: the target is the whole margin, 0.05: n = 100 (0.1 / 0.05)^2 (t / Z)^2 =
    # 400 x (1.96587 / 1.95996)^2 = 402.4 -> 403 (t on 402 df).
    assert M.to_settle(_est(0.0, -0.1, 0.1, 100), 0.05)["n_needed"] == 403


def test_every_statement_test_reads_a_declared_margin():
    # Each member of a judge's family has a margin: none can print ok without one.
    declared = R.margins()
    for key in ("self_preference_eo", "family_preference_eo", "self_preference_eqb", "family_preference_eqb",
                "dbg", "family_dbg", "verbosity_bias",
                "human_ceiling", "position_bias", "regression", "perturbation_shift", "self_recognition"):
        assert key in declared and declared[key].why.strip()
    assert declared["position_bias"].value == 0.03 and declared["position_bias"].null == 0.5
    assert declared["self_preference_eo"].value == 0.05 and declared["human_ceiling"].sides == M.LOWER
    assert all(m.scale_share and m.value == 0.05 for m in M.POINTWISE_MARGINS.values())
    with pytest.raises(ValueError, match="no figure 'eo'"):
        M.parse_overrides(["eo=0.1"], declared)
    with pytest.raises(ValueError, match="must be > 0"):
        M.parse_overrides(["self_preference_eo=0"], declared)
    assert M.parse_overrides(["self_preference_eo=0.03"], declared) == {"self_preference_eo": 0.03}


def test_ok_needs_the_adjusted_equivalence_test():
    # Three members (Holm). Zero tests: order 1e-6 (x3 -> 3e-6, a caution), EO 0.9, verbosity 0.8:
    # only the order rejects. Equivalence p-values:
    #   order 0.62 [0.58, 0.66] vs 0.5 +- 0.03: far outside -> p = 1;
    #   EO 0 [-0.04516, +0.04516] vs +-0.05: z = 0.05 / (0.04516 / Z) = 2.170 -> 2 x 0.0150 = 0.0300
    #     (its 95% interval IS inside the margin);
    #   verbosity +0.01 [-0.01, +0.03]: upper (0.05 - 0.01) / (0.02 / Z) = 3.92 -> 2 x 4.43e-5 = 8.9e-5.
    # Holm on (1, 0.0300, 8.9e-5): 3 x 8.9e-5 = 2.7e-4 (ok); 2 x 0.0300 = 0.0600 (not < 0.05: the
    # interval is inside, but not after adjusting for 3 tests: inconclusive); 1.
    metrics = {
        "position_bias": _est(0.62, 0.58, 0.66, 200, p_value=1e-6),
        "self_preference_eo": _est(0.0, -0.04516, 0.04516, 400, p_value=0.9),
        "verbosity_bias": _est(0.01, -0.01, 0.03, 900, p_value=0.8),
    }
    fam = family(metrics)
    eq = dict(zip([t.key for t in fam.tests], fam.equivalence, strict=True))
    assert eq["self_preference_eo"] == pytest.approx(0.0600, abs=2e-4)
    assert eq["verbosity_bias"] == pytest.approx(3 * 2 * norm.sf(0.04 / (0.02 / Z)))
    assert [fam.verdict(k) for k in ("order", "self_preference_eo", "verbosity_bias")] == \
        ["caution", "inconclusive", "ok"]
    said = dict((t.split(":")[0], (k, t)) for k, t in trust_summary(metrics))
    assert said["Order"][0] == "caution"
    assert said["Self-preference"][0] == "inconclusive"
    # verbosity's interval lies inside +-0.05 after adjustment: the Length statement says ok (it used
    # to be written only as a caution, so an untested judge and a shown one read alike: silence)
    assert said["Length"][0] == "ok" and "beyond humans' past its margin +-0.050" in said["Length"][1]
    # The end farther from 0 (either end: symmetric) and the margin are named.
    assert "0.045 is not excluded (margin +-0.050" in said["Self-preference"][1]
    # The same EO alone in its family (one test): 0.0300 < 0.05, ok.
    alone = trust_summary({"self_preference_eo": metrics["self_preference_eo"]})
    assert alone[0][0] == "ok" and "beyond its margin +-0.050 against humans" in alone[0][1]
    # --margin: the same EO read against +-0.02 can no longer be ok.
    fam2 = family({"self_preference_eo": metrics["self_preference_eo"]}, margins={"self_preference_eo": 0.02})
    assert fam2.verdict("self_preference_eo") == "inconclusive"


def test_the_bundled_pandalm_card_reads_inconclusive():
    """Issue 41: the bundled PandaLM card said "[ok] ... no preference for its family's outputs
    detectable (EO +0.028 [-0.068, +0.141])": +0.141 is not excluded, 2.8x the 0.05 margin. With the
    prompts as clusters (issue 41 item 1) the interval is [-0.084, +0.164]: +0.164 is not excluded."""
    from judgebias.bundled import BUNDLED, analyze_bundled
    from judgebias.reporting.trust import mutual_gold

    result = analyze_bundled(next(e for e in BUNDLED if e.name == "pandalm"), reps=200)
    m = result["judges"]["pandalm-7b"]
    eo = m["family_preference_eo"]
    assert round(eo["value"], 3) == 0.028 and eo["ci_high"] >= 0.141  # the independent-rows end, or wider
    assert eo["verdict"] == "inconclusive"
    said, _ = statements(m, mutual_gold=mutual_gold(result))
    family_said = [(k, t) for k, t in said if t.startswith("Family preference")]
    assert family_said and family_said[0][0] == "inconclusive"
    assert f"one as large as {eo['ci_high']:+.3f} is not excluded (margin +-0.050" in family_said[0][1]
    assert "more pairs with one family response and a human label" in family_said[0][1]
    # Length is always said: a caution when its adjusted test rejects, else inconclusive here
    # (+0.127 [+0.034, +0.224] leaves the +-0.05 margin)
    length = [(k, t) for k, t in said if t.startswith("Length")]
    assert length and length[0][0] in ("caution", "inconclusive")
    # No ok on the card has an interval leaving its margin.
    for judge, metrics in result["judges"].items():
        for member in metrics["multiplicity"]["members"]:
            assert member["verdict"] != "ok" or member["equivalence_p"] < 0.05, (judge, member)
    assert result["settings"]["margins"]["family_preference_eo"]["value"] == 0.05


def _probe_table(n_pairs: int, changed: dict[str, list[tuple[str, str]]]) -> pd.DataFrame:
    """Verdict-only probe rows (no probabilities), the perturbed side always A; ``changed`` gives
    per perturbation the (before, after) verdicts of the first pairs, the rest stay "a" -> "a"."""
    from judgebias.probes.perturbations import PERTURBATIONS

    rows = []
    for p in PERTURBATIONS.values():
        moves = changed.get(p.tag, [])
        for i in range(n_pairs):
            before, after = moves[i] if i < len(moves) else ("a", "a")
            rows.append({"judge": "gemma", "pair_id": f"p{i}", "perturbation": p.tag, "perturbed_side": "a",
                         "verdict_before": before, "verdict_after": after})
    return pd.DataFrame(rows)


def _probes(df: pd.DataFrame) -> dict:
    from judgebias.metrics.robustness import perturbation_shift, robustness_rate
    from judgebias.probes.perturbations import PERTURBATIONS

    return {"perturbations": {
        "perturbations": {p.tag: {"description": p.description} for p in PERTURBATIONS.values()},
        "judges": {"gemma": {p.tag: {"robustness_rate": robustness_rate(df, "gemma", p.tag).to_dict(),
                                     "shift": perturbation_shift(df, "gemma", p.tag).to_dict()}
                             for p in PERTURBATIONS.values()}}}}


def test_the_demo_gemma_probe_case_reads_inconclusive():
    """Issue 41: gemma got "[ok] None of the 7 perturbations ... moved it detectably" while 62.5% of
    its verdicts changed under authority, on 8 pairs."""
    from judgebias.probes.perturbations import PERTURBATIONS

    authority = next(p.tag for p in PERTURBATIONS.values() if p.tag.startswith("authority"))
    # Authority, 8 pairs, perturbed side A: 3 verdicts go A -> B (vote shift -1 each), 2 go B -> A
    # (+1 each), 3 stay: shifts (-1, -1, -1, +1, +1, 0, 0, 0), 5 of 8 = 62.5% changed.
    # mean -1/8 = -0.125; sum of squares 5 - 8 x 0.015625 = 4.875, sd = sqrt(4.875 / 7) = 0.8345,
    # se = 0.2950, t_7 = 2.3646: [-0.823, +0.573]; t = -0.424, p = 0.68: not detectable.
    # The other six: no verdict changed, [0, 0] widened to +-3/8 by the rule of three: inconclusive too.
    moves = [("a", "b")] * 3 + [("b", "a")] * 2
    probes = _probes(_probe_table(8, {authority: moves}))
    shift = probes["perturbations"]["judges"]["gemma"][authority]["shift"]
    assert shift["value"] == pytest.approx(-0.125)
    assert shift["ci_low"] == pytest.approx(-0.823, abs=5e-4)
    assert shift["ci_high"] == pytest.approx(0.573, abs=5e-4)
    assert probes["perturbations"]["judges"]["gemma"][authority]["robustness_rate"]["value"] == 0.375
    said = probe_statements(probes, "gemma")
    kinds = [k for k, _ in said]
    assert "ok" not in kinds and kinds == ["inconclusive"]
    text = said[0][1]
    assert "(7 of 7)" in text
    assert "a shift as large as -0.823 is not excluded (margin +-0.050" in text
    assert "verdicts unchanged on 37.5%" in text
    # The same judge on 100 pairs per perturbation, none moved: +-3/100 = +-0.03 inside +-0.05;
    # each equivalence p = 2 x sf(0.05 / (0.03 / Z)) = 0.00109, Holm x 7 = 0.0076 < 0.05: ok.
    calm = probe_statements(_probes(_probe_table(100, {})), "gemma")
    assert [k for k, _ in calm] == ["ok"] and calm[0][1].startswith("All 7 perturbations tried (CALM) left")


def test_analyze_records_margins_and_the_cli_overrides_them(tmp_path):
    from test_analyze import synthetic

    from judgebias.cli import app
    from judgebias.tables.files import write_table

    table = tmp_path / "t.parquet"
    write_table(synthetic(), table)
    out = tmp_path / "m.json"
    runner = CliRunner()
    res = runner.invoke(app, ["analyze", str(table), "--out", str(out), "--no-mlflow", "--no-report",
                              "--reps", "200", "--margin", "position_bias=0.2", "--margin", "dbg=0.1"])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    margins = result["settings"]["margins"]
    assert margins["position_bias"] == {**margins["position_bias"], "value": 0.2, "source": "--margin"}
    assert margins["self_preference_eo"]["value"] == 0.05
    assert margins["self_preference_eo"]["source"] == "default"
    for metrics in result["judges"].values():
        assert metrics["multiplicity"]["margins"]["position_bias"] == 0.2
        order = [m for m in metrics["multiplicity"]["members"] if m["test"] == "order"]
        assert not order or order[0]["margin"] == 0.2
    bad = runner.invoke(app, ["analyze", str(table), "--out", str(out), "--no-mlflow", "--margin", "eo=1"])
    assert bad.exit_code == 2 and "no figure 'eo' declares a margin" in bad.output
    from judgebias.tracking.log_analysis import analysis_params

    assert analysis_params(result)["margin.position_bias"] == 0.2
    # report reads the statements against another margin; a key no figure declares is refused.
    page = tmp_path / "page.html"
    res = runner.invoke(app, ["report", str(out), "--out", str(page), "--margin", "self_preference_eo=0.5"])
    assert res.exit_code == 0, res.output
    # A caution stays a caution whatever the margin.
    assert "Self-preference: favours its own outputs" in page.with_suffix(".md").read_text()
    # What the page reads: the recorded margins (position_bias 0.2) with the report's on top.
    metrics = next(iter(result["judges"].values()))
    fam = family(metrics, margins={"self_preference_eo": 0.5})
    assert fam.test("self_preference_eo").width == 0.5 and fam.test("order").width == 0.2
    bad = runner.invoke(app, ["report", str(out), "--out", str(page), "--margin", "nope=0.1"])
    assert bad.exit_code == 2 and "no figure 'nope' declares a margin" in bad.output


def test_pointwise_analyze_takes_its_own_margins(tmp_path):
    from test_pointwise_finished import _two_criteria

    from judgebias.cli import app
    from judgebias.tables.files import write_table

    scores, out = tmp_path / "scores.jsonl", tmp_path / "m.json"
    write_table(_two_criteria(), scores)
    runner = CliRunner()
    res = runner.invoke(app, ["analyze", str(scores), "--out", str(out), "--no-mlflow", "--reps", "100",
                              "--margin", "score_bias_human=0.5"])
    assert res.exit_code == 0, res.output
    margins = json.loads(out.read_text())["settings"]["margins"]
    assert margins["score_bias_human"]["value"] == 0.5 and margins["score_bias_human"]["source"] == "--margin"
    assert margins["score_dbg"]["value"] == 0.05 and margins["score_dbg"]["scale_share"] is True
    # A pairwise figure's key on a pointwise table is refused, naming the item.
    bad = runner.invoke(app, ["analyze", str(scores), "--out", str(out), "--no-mlflow",
                              "--margin", "self_preference_eo=0.1"])
    assert bad.exit_code == 2 and "no figure 'self_preference_eo' declares a margin" in bad.output


def test_a_perturbation_that_flips_verdicts_is_not_ok_however_small_its_mean_shift():
    """The demo's gemma sits near a tie: a distraction moved its mean P(A) by -0.003 [-0.020, +0.014]
    (inside +-0.05; equivalence p = 2 x sf(0.047 / (0.017 / Z)) ~ 1e-8) yet changed 37.5% of its
    verdicts. "ok" also needs the verdicts-unchanged share's interval at or above 0.9."""
    def probes(rate):
        return {"perturbations": {
            "perturbations": {"distraction@1": {"description": "a distraction"}},
            "judges": {"gemma": {"distraction@1": {
                "robustness_rate": rate,
                "shift": _est(-0.003, -0.020, 0.014, 100, p_value=0.7)}}}}}

    flipping = probe_statements(probes(_est(0.625, 0.52, 0.72, 100)), "gemma")
    assert [k for k, _ in flipping] == ["inconclusive"]
    assert "changed 37.5% of the verdicts and as many as 48.0% is not excluded (ok needs at most 10.0%)" \
        in flipping[0][1]
    steady = probe_statements(probes(_est(0.97, 0.915, 0.99, 100)), "gemma")
    assert [k for k, _ in steady] == ["ok"]
