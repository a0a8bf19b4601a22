"""``judgebias gate``: rules passing, failing and inconclusive, cautions, 'no change since', YAML rules,
bad rules, and the command's exit code and lines."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from judgebias.bundled import BUNDLED, analyze_bundled
from judgebias.cli import app
from judgebias.reporting.gate import FAIL, INCONCLUSIVE, PASS, broken, evaluate, parse_rule, rules_from_yaml

LLMBAR = next(b for b in BUNDLED if b.name == "llmbar-natural")


def _est(value, lo, hi, n=100, **extra):
    return {"value": value, "ci_low": lo, "ci_high": hi, "n": n, **extra}


RESULT = {
    "judges": {
        "j": {
            "agreement_human": _est(0.67, 0.573, 0.755),
            "position_consistency": _est(0.95, 0.885, 0.981),
            "position_bias": _est(0.605, 0.556, 0.654, p_value=5e-5, p_adjusted=2e-4),
            "verbosity_bias": _est(0.02, -0.1, 0.14, p_value=0.7, p_adjusted=1.0),
            "multiplicity": {
                "method": "holm",
                "members": [
                    {"test": "order", "figure": "position_bias", "p_value": 5e-5, "p_adjusted": 2e-4},
                    {"test": "verbosity_bias", "figure": "verbosity_bias", "p_value": 0.7, "p_adjusted": 1.0},
                ],
            },
            "skipped": {"dbg": "no generator names"},
        }
    }
}


def _one(rule, on_inconclusive="fail"):
    return evaluate([parse_rule(rule)], RESULT, on_inconclusive=on_inconclusive)[0]


def test_bounds_on_interval_ends_pass_and_fail():
    assert _one("agreement_human.ci_low >= 0.5").status == PASS  # 0.573 >= 0.5
    v = _one("agreement_human.ci_low >= 0.7")  # 0.573 < 0.7
    assert v.status == FAIL
    assert v.line == "agreement_human = 0.670 [0.573, 0.755], n=100 (ci_low 0.573)"
    assert _one("agreement_human.ci_high < 0.8").status == PASS


def test_point_estimate_inside_its_interval_is_inconclusive():
    # 0.95 >= 0.95 holds, but the interval [0.885, 0.981] straddles 0.95
    v = _one("position_consistency >= 0.95")
    assert v.status == INCONCLUSIVE and "straddles 0.95" in v.line
    assert broken([v], "fail") == [v] and broken([v], "pass") == []
    assert _one("position_consistency.value >= 0.8").status == PASS  # whole interval above 0.8
    assert _one("position_consistency > 0.99").status == FAIL  # whole interval below


def test_caution_rules():
    v = _one("no caution on position_bias")
    assert v.status == FAIL and "adjusted p 0.0002" in v.line
    assert _one("no caution on verbosity_bias").status == PASS
    assert _one("no caution on agreement_human").status == PASS  # no test behind it


def test_a_figure_not_computed_breaks_its_rule():
    v = _one("dbg.ci_high <= 0.1")
    assert v.status == FAIL and v.line == "dbg: not computed (no generator names)"


def test_bad_rules_are_named():
    for text, match in (
        ("agreement.ci_low >= 0.7", "no figure"),
        ("agreement_human ~ 3", "none of"),
        ("", "empty"),
    ):
        with pytest.raises(ValueError, match=match):
            parse_rule(text)
    with pytest.raises(ValueError, match="judge"):
        evaluate([parse_rule("tie_rate <= 0.3")], RESULT, judges=["nobody"])


def test_rules_from_yaml():
    rules = rules_from_yaml("rules:\n  - agreement_human.ci_low >= 0.5\n  - no caution on verbosity_bias\n")
    assert [r.kind for r in rules] == ["bound", "caution"]
    assert [r.text for r in rules_from_yaml("- tie_rate <= 0.3\n")] == ["tie_rate <= 0.3"]
    with pytest.raises(ValueError, match="list of rules"):
        rules_from_yaml("rules: 3\n")


@pytest.fixture(scope="module")
def metrics(tmp_path_factory):
    path = tmp_path_factory.mktemp("gate") / "metrics.json"
    path.write_text(json.dumps(analyze_bundled(LLMBAR, reps=200)))
    return path


def test_gate_command_pass_fail_inconclusive(metrics, tmp_path):
    ok = CliRunner().invoke(
        app, ["gate", str(metrics), "--rule", "agreement_human.ci_low >= 0.5", "--judge", "GPT-4/Vanilla"]
    )
    assert ok.exit_code == 0, ok.output
    bad = CliRunner().invoke(
        app, ["gate", str(metrics), "--rule", "agreement_human.ci_low >= 0.7", "--judge", "ChatGPT/Vanilla"]
    )
    assert bad.exit_code == 1
    assert (
        "FAIL [ChatGPT/Vanilla] agreement_human.ci_low >= 0.7: agreement_human = 0.670 [0.573, 0.755], "
        "n=100 (ci_low 0.573)"
    ) in bad.output
    rule = ["--rule", "position_consistency >= 0.95", "--judge", "GPT-4/Vanilla"]
    assert CliRunner().invoke(app, ["gate", str(metrics), *rule]).exit_code == 1
    lenient = CliRunner().invoke(app, ["gate", str(metrics), *rule, "--on-inconclusive", "pass"])
    assert lenient.exit_code == 0 and "INCONCLUSIVE [GPT-4/Vanilla]" in lenient.output
    rules = tmp_path / "gate.yaml"
    rules.write_text("rules:\n  - no caution on position_bias\n")
    caution = CliRunner().invoke(app, ["gate", str(metrics), "--rules", str(rules)])
    assert caution.exit_code == 1 and "FAIL [ChatGPT/Vanilla] no caution on position_bias" in caution.output
    wrong = CliRunner().invoke(app, ["gate", str(metrics), "--rule", "nonsense >= 1"])
    assert wrong.exit_code == 2


def test_no_change_since_the_same_run(tmp_path):
    table = str(LLMBAR.path())
    res = CliRunner().invoke(
        app, ["gate", table, "--rule", f"no change since {table}", "--judge", "GPT-4/Swap", "--reps", "200"]
    )
    assert res.exit_code == 0, res.output
