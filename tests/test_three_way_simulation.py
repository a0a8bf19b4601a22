"""The three-way simulation (benchmarks/three_way.py) run small: a judge biased at twice each margin
must (almost) never get "ok", and an unbiased one gets it once n is large enough. It fails if "ok"
went back to "the test does not reject" (then the biased judge at n=100, whose EO and order tests
mostly do not reject, would get ok most of the time)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "three_way.py"


def _module():
    spec = importlib.util.spec_from_file_location("three_way", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_biased_judge_gets_no_ok_and_an_unbiased_one_gets_it_with_enough_pairs():
    three_way = _module()
    s = three_way.run(reps=40, sizes=(100, 6400), seed=1)
    rates = s["rates"]
    biased, unbiased = "biased (2x margin)", "unbiased"
    for st in three_way.STATEMENTS:
        for n in (100, 6400):
            # P(ok) <= 5% is the claim; with 40 judges a true rate of 5% shows at most 0.125 by
            # binomial chance (P(X > 5 | 40, 0.05) = 0.014): 0.1 would still allow some slack.
            assert rates[(biased, st, n)]["ok"] <= 0.1, (st, n, rates[(biased, st, n)])
    # At n = 100 the biased judge's EO test mostly does not reject (caution is rare): the old rule
    # would have printed ok there; the new one says inconclusive.
    assert rates[(biased, three_way.STATEMENTS[0], 100)]["inconclusive"] >= 0.5
    # Unbiased: at 6,400 pairs EO's half-width is about 1.96 sqrt(2 x 0.21 / 3200) = 0.022 and the
    # order's 1.96 sqrt(0.125 / 6400) = 0.0087, well inside their margins even after Holm (x9):
    # ok nearly always; at 100 pairs never (half-widths 0.13 and 0.07 exceed 0.05 and 0.03).
    for st in three_way.STATEMENTS[:2]:
        assert rates[(unbiased, st, 6400)]["ok"] >= 0.9, (st, rates[(unbiased, st, 6400)])
        assert rates[(unbiased, st, 100)]["ok"] == 0.0, (st, rates[(unbiased, st, 100)])
    # The shifts (sd 0.1 per pair): half-width 1.96 x 0.1 / 10 = 0.02 at 100 pairs, inside +-0.05.
    assert rates[(unbiased, three_way.STATEMENTS[2], 100)]["ok"] >= 0.9
