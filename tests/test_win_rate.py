"""Length-controlled win rate (AlpacaEval 2 GLM, length-only form) on a hand-computed table."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from judgebias.metrics.win_rate import baseline_of, length_controlled_win_rate, length_controlled_win_rates
from judgebias.stats import InsufficientData


def _table(n_long=6, wins_long=5, wins_short=2, extra_model=False):
    rows = []
    for i in range(2 * n_long):
        longer = i < n_long
        win = i < wins_long if longer else i - n_long < wins_short
        m, b = ("x" * 20, "y" * 10) if longer else ("x" * 10, "y" * 20)
        model_is_a = i % 2 == 0  # half the pairs show the model as A
        choice = "a" if win == model_is_a else "b"
        rows.append({"pair_id": f"p{i}", "prompt": f"q{i}", "judge": "j", "verdict": choice,
                     "response_a": m if model_is_a else b, "response_b": b if model_is_a else m,
                     "generator_a": "m" if model_is_a else "base",
                     "generator_b": "base" if model_is_a else "m"})
    if extra_model:
        rows += [{**r, "pair_id": r["pair_id"] + "n", "generator_a": r["generator_a"].replace("m", "n"),
                  "generator_b": r["generator_b"].replace("m", "n")} for r in rows]
    return pd.DataFrame(rows)


def test_lc_win_rate_by_hand():
    # delta = +10 chars in 6 pairs (model wins 5), -10 in 6 (wins 2); sd(delta) = 10 sqrt(12/11), so
    # x = tanh(delta/sd) = +-c. Two groups make the GLM saturated: theta + c phi = logit(5/6) = ln 5,
    # theta - c phi = logit(2/6) = -ln 2, so theta = ln(5/2)/2 and LC = sigmoid(theta) =
    # sqrt(2.5) / (1 + sqrt(2.5)) = 0.61257; phi = ln 10 / (2 tanh(1/sqrt(12/11))) = 1.5493.
    # Raw win rate: 7/12 = 0.5833.
    est = length_controlled_win_rate(_table(), "j", "m", "base")
    assert est.value == pytest.approx(math.sqrt(2.5) / (1 + math.sqrt(2.5)), abs=1e-6)
    assert est.details["raw_win_rate"]["value"] == pytest.approx(7 / 12)
    c = math.tanh(1 / math.sqrt(12 / 11))
    assert est.details["length_coef"]["coef"] == pytest.approx(math.log(10) / (2 * c), abs=1e-5)
    assert est.ci_low < est.value < est.ci_high and est.n == 12
    # The same 7 wins with the length advantage reversed (longer wins 2/6, shorter 5/6): theta is the
    # mean of the same two logits, so LC is unchanged, and phi changes sign.
    reversed_ = length_controlled_win_rate(_table(wins_long=2, wins_short=5), "j", "m", "base")
    assert reversed_.value == pytest.approx(est.value, abs=1e-6)
    phi = est.details["length_coef"]["coef"]
    assert reversed_.details["length_coef"]["coef"] == pytest.approx(-phi, abs=1e-5)


def test_baseline_detection_and_errors():
    assert baseline_of(_table(), "j") is None  # two generators: each is in every pair
    table = _table(extra_model=True)
    assert baseline_of(table, "j") == "base"
    rates, skipped = length_controlled_win_rates(table, ["j"])
    assert [r["model"] for r in rates] == ["m", "n"] and not skipped
    rates, skipped = length_controlled_win_rates(_table(), ["j"])
    assert rates == [] and "pass --baseline" in skipped["j"]
    with pytest.raises(InsufficientData, match="4 judged pairs"):
        length_controlled_win_rate(_table(n_long=2, wins_long=1, wins_short=1), "j", "m", "base")
    with pytest.raises(ValueError, match="both 'm'"):
        length_controlled_win_rate(_table(), "j", "m", "m")
    with pytest.raises(ValueError, match="response_a"):
        length_controlled_win_rate(_table().drop(columns="response_a"), "j", "m", "base")
