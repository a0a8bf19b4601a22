"""score_perplexity on a hand-computed table (arithmetic in the comments)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from judgebias.metrics.pointwise_perplexity import score_perplexity
from judgebias.reporting.pointwise_analysis import analyze_pointwise
from judgebias.stats import InsufficientData
from judgebias.tables.pointwise import validate_pointwise


def table() -> pd.DataFrame:
    # log ppl x = 0, 1, 2, 3; judge s = 8, 6, 6, 4; humans h = 6, 5, 5, 4 (gap 2, 1, 1, 0).
    # Item 5 has no perplexity, item 6 no human score: both left out and counted.
    return validate_pointwise(pd.DataFrame({
        "item_id": [f"i{k}" for k in range(1, 7)], "prompt": "q", "response": [f"r{k}" for k in range(1, 7)],
        "generator": "m", "judge": "j", "score": [8.0, 6.0, 6.0, 4.0, 5.0, 5.0],
        "scale_min": 1, "scale_max": 10, "human_scores": [[6], [4, 6], [5], [4], [5], []],
        "ppl": [1.0, math.e, math.e**2, math.e**3, None, 2.0],
    }))[0]


def test_score_perplexity_by_hand():
    est = score_perplexity(table(), "j")
    # Gap slope: x - 1.5 = -1.5, -.5, .5, 1.5 (Sxx 5); gap - 1 = 1, 0, 0, -1: -3 / 5 = -0.6.
    # Judge slope: s - 6 = 2, 0, 0, -2: -6/5 = -1.2; human slope: -3/5 = -0.6.
    assert est.value == pytest.approx(-0.6)
    assert est.details["judge_slope"] == pytest.approx(-1.2)
    assert est.details["human_slope"] == pytest.approx(-0.6)
    # HC3: residuals .1, -.3, .3, -.1; leverages 1/4 + (x - 1.5)^2/5 = .7, .3, .3, .7;
    # Var = sum (x - 1.5)^2 e^2 / (1 - h)^2 / Sxx^2 = (.25 + .045918 + .045918 + .25) / 25.
    se = math.sqrt((0.25 + 2 * 0.25 * 0.09 / 0.49 + 0.25) / 25)
    assert (est.ci_low, est.ci_high) == pytest.approx((-0.6 - 1.959964 * se, -0.6 + 1.959964 * se), abs=1e-5)
    assert est.n == 4 and est.exclusions == {"no_perplexity": 1, "no_human_score": 1}
    # Bins are log-ppl quintiles of the four items; their gaps average back to the mean gap 1.
    gaps = [b["value"] * b["n"] for b in est.details["bins"]]
    assert sum(b["n"] for b in est.details["bins"]) == 4 and sum(gaps) == pytest.approx(4.0)


def test_score_perplexity_in_analyze_and_skipped_without_ppl():
    res = analyze_pointwise(table(), reps=200)
    assert res["judges"]["j"]["score_perplexity"]["value"] == pytest.approx(-0.6)
    res = analyze_pointwise(table().drop(columns="ppl"), reps=200)
    assert "no ppl column" in res["judges"]["j"]["skipped"]["score_perplexity"]
    flat = table().assign(ppl=np.e)
    with pytest.raises(InsufficientData, match="different perplexities"):
        score_perplexity(flat, "j")


def test_fill_response_perplexity_computes_each_response_once():
    from judgebias.backends.protocol import TokenLogprobs
    from judgebias.engine.perplexity import fill_response_perplexity

    class Counting:
        is_chat = True

        def __init__(self):
            self.calls: list[str] = []

        def continuation_logprobs(self, contexts, continuations):
            self.calls.extend(continuations)
            return [TokenLogprobs((-1.0, -1.0)) if c != "bad" else TokenLogprobs((), error="too long")
                    for c in continuations]

    df = pd.DataFrame({"prompt": ["q", "q", "q"], "response": ["a", "a", "bad"], "judge": ["j", "k", "j"]})
    backend = Counting()
    out = fill_response_perplexity(df, backend)
    # mean NLL 1 -> ppl e; "a" read once although two rows carry it.
    assert out["ppl"].iloc[0] == pytest.approx(math.e) and backend.calls == ["a", "bad"]
    assert math.isnan(out["ppl"].iloc[2]) and out["ppl_error"].iloc[2] == "too long"
