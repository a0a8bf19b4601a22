"""Repeat-run noise: the two figures on hand-computed verdicts, ``judge --repeats K`` through the real
judging engine and call cache (distinct yet cached repeats of a sampling judge; a log-probability read
re-read and checked identical), and analyze's figures from such a table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from test_judging import DATA, tiny_folder  # noqa: F401 (a fixture)

from judgebias.backends.call_cache import CachedBackend, ResponseCache
from judgebias.backends.protocol import Generation, GenerationParams, OptionScores
from judgebias.engine.pairwise import judge_pairs
from judgebias.engine.repeats import repeated
from judgebias.metrics.repeats import REPEATS_COLUMN, repeat_kappa, verdict_stability
from judgebias.prompts import DBG_AB, MTBENCH_PAIR
from judgebias.stats import InsufficientData
from judgebias.tables.records import Pair


def _rows(lists):
    return pd.DataFrame({"judge": "j", REPEATS_COLUMN: lists})


HAND = [["a", "a", "a"], ["a", "a", "b"], ["b", "b", "b"], ["tie", "a", "b"]]


def test_stability_by_hand():
    # modal shares 3/3, 2/3, 3/3, 1/3: mean 0.75; all three identical on 2 of 4 pairs
    est = verdict_stability(_rows(HAND), "j")
    assert est.value == pytest.approx(0.75) and est.n == 4
    assert est.details["all_identical"]["count"] == 2 and est.details["repeats"] == 3
    assert 0 <= est.ci_low <= 0.75 <= est.ci_high <= 1


def test_fleiss_kappa_by_hand():
    # counts (a, b, tie): (3,0,0) (2,1,0) (0,3,0) (1,1,1)
    # P_i = (sum n^2 - 3) / 6 = 1, 1/3, 1, 0 -> P-bar 7/12.
    # p_a = 6/12, p_b = 5/12, p_tie = 1/12 -> P_e = (36 + 25 + 1) / 144 = 62/144.
    # kappa = (7/12 - 62/144) / (1 - 62/144) = 22/82 = 0.268293
    est = repeat_kappa(_rows(HAND), "j", reps=500)
    assert est.value == pytest.approx(22 / 82)
    from statsmodels.stats.inter_rater import fleiss_kappa

    assert est.value == pytest.approx(fleiss_kappa(np.array([[3, 0, 0], [2, 1, 0], [0, 3, 0], [1, 1, 1]])))
    assert -1 <= est.ci_low <= est.value <= est.ci_high <= 1


def test_missing_repeats_are_excluded_and_bad_labels_refused():
    est = verdict_stability(_rows([*HAND, ["a", None, "a"], ["a"]]), "j")
    assert est.n == 4 and est.exclusions == {"missing_repeat": 2}
    with pytest.raises(ValueError, match="'maybe'"):
        verdict_stability(_rows([["a", "maybe"]]), "j")
    with pytest.raises(InsufficientData, match="same label"):
        repeat_kappa(_rows([["a", "a"], ["a", "a"]]), "j")
    with pytest.raises(InsufficientData, match="fewer than 2 repeats"):
        verdict_stability(_rows([["a"], ["b"]]), "j")


def _pair(i: int) -> Pair:
    prompt, a, b = f"question {i}", "good answer", "bad answer"
    return Pair(pair_id=Pair.make_id(prompt, a, b), prompt=prompt, response_a=a, response_b=b, human=("a",))


def _first(prompt) -> str:
    content = prompt.messages[-1].content
    for marker in ("<Response A>", "[The Start of Assistant A's Answer]\n"):
        if marker in content:
            return content.split(marker, 1)[1].split("<", 1)[0].split("\n", 1)[0]
    raise AssertionError(content)


class Sampler:
    """A generating judge whose choice depends on the sampling seed: the good answer on even seeds,
    the bad one on odd seeds, in whichever order it is shown. Answers only in its text."""

    name = "sampler"
    is_chat = True

    def __init__(self):
        self.generated = 0

    def identity(self) -> dict:
        return {"backend": "sampler"}

    def generate(self, prompts, params: GenerationParams):
        self.generated += len(prompts)
        good_first = [_first(p) == "good answer" for p in prompts]
        wants_good = params.seed % 2 == 0
        return [
            Generation(text=f"seed {params.seed}: [[{'A' if g == wants_good else 'B'}]]") for g in good_first
        ]

    def score_options(self, prompts, options):
        return [OptionScores({o: math.nan for o in options}, mass=math.nan, raw="") for _ in prompts]


class Reader:
    """A log-probability judge: P(first shown) from a table, ``drift`` added on every later read."""

    name = "reader"
    is_chat = True

    def __init__(self, drift: float = 0.0):
        self.drift, self.reads = drift, 0

    def identity(self) -> dict:
        return {"backend": "reader"}

    def score_options(self, prompts, options):
        self.reads += 1
        p = 0.8 + (self.drift if self.reads > 1 else 0.0)
        return [
            OptionScores(
                {
                    "A": p if _first(q) == "good answer" else 1 - p,
                    "B": 1 - p if _first(q) == "good answer" else p,
                },
                mass=1.0,
                raw="A",
            )
            for q in prompts
        ]


def test_sampling_judge_repeats_are_distinct_calls_yet_cached(tmp_path):
    pairs = [_pair(i) for i in range(3)]
    inner = Sampler()
    params = GenerationParams(max_new_tokens=32, temperature=0.7)
    runner = CachedBackend(inner, ResponseCache(tmp_path))
    first = judge_pairs(pairs, runner, MTBENCH_PAIR, params=params).table()
    out, check = repeated(
        first, pairs, runner, MTBENCH_PAIR, judge="sampler", chat=None, params=params, repeats=3, chunk_size=8
    )
    # seeds 0, 1, 2: good, bad, good in both orders -> verdicts a, b, a for every pair
    assert out[REPEATS_COLUMN].tolist() == [["a", "b", "a"]] * 3
    assert inner.generated == 3 * 3 * 2  # 3 repeats x 3 pairs x 2 orders: each repeat its own call
    assert not check.deterministic and "3 repeats of a generating judge" in check.line()
    again = CachedBackend(Sampler(), ResponseCache(tmp_path))
    first2 = judge_pairs(pairs, again, MTBENCH_PAIR, params=params).table()
    out2, _ = repeated(
        first2, pairs, again, MTBENCH_PAIR, judge="sampler", chat=None, params=params, repeats=3, chunk_size=8
    )
    assert again.inner.generated == 0 and out2[REPEATS_COLUMN].tolist() == out[REPEATS_COLUMN].tolist()
    # stability 2/3 per pair; Fleiss: P_i = 1/3, p_a 2/3, p_b 1/3, P_e 5/9 -> (1/3 - 5/9) / (4/9) = -0.5
    rows = out.assign(judge="sampler")
    assert verdict_stability(rows, "sampler").value == pytest.approx(2 / 3)
    assert repeat_kappa(rows, "sampler", reps=200).value == pytest.approx(-0.5)


@pytest.mark.parametrize(("drift", "same"), [(0.0, True), (0.15, False)])
def test_log_probability_read_is_reread_and_checked(tmp_path, drift, same):
    pairs = [_pair(i) for i in range(2)]
    inner = Reader(drift)
    runner = CachedBackend(inner, ResponseCache(tmp_path))
    first = judge_pairs(pairs, runner, DBG_AB).table()
    _, check = repeated(
        first,
        pairs,
        runner,
        DBG_AB,
        judge="reader",
        chat=None,
        params=GenerationParams(),
        repeats=2,
        chunk_size=8,
    )
    assert inner.reads == 2  # the repeat went past the cache to the model
    assert check.deterministic and ("are identical" in check.line()) == same
    assert check.max_p_difference == pytest.approx(drift, abs=1e-9)


def test_analyze_reports_the_repeat_figures():
    from judgebias.reporting.analysis import analyze
    from judgebias.tables.pairwise import validate

    lists = [["a", "a", "b"], ["b", "b", "b"], ["a", "tie", "a"], ["a", "a", "a"]]
    table = pd.DataFrame(
        {
            "pair_id": [f"p{i}" for i in range(4)],
            "prompt": [f"q{i}" for i in range(4)],
            "response_a": "x",
            "response_b": "y y",
            "judge": "j",
            "verdict": [v[0] for v in lists],
            REPEATS_COLUMN: lists,
        }
    )
    m = analyze(validate(table)[0], reps=200)["judges"]["j"]
    # modal shares 2/3, 1, 2/3, 1 -> 5/6
    assert m["repeat_stability"]["value"] == pytest.approx(5 / 6)
    assert "repeat_kappa" in m


def test_judge_command_repeats_a_log_probability_read(tiny_folder, tmp_path):  # noqa: F811
    from typer.testing import CliRunner

    from judgebias.cli import app
    from judgebias.tables.files import read_table

    out = tmp_path / "judged.jsonl"
    args = ["judge", str(DATA), "--judge", str(tiny_folder), "--out", str(out)]
    res = CliRunner().invoke(app, [*args, "--name", "tiny", "--cache-dir", str(tmp_path / "cache"),
                                   "--device", "cpu", "--repeats", "3"])
    assert res.exit_code == 0, res.output
    assert (
        "log-probability read: deterministic, no sampling; 3 repeats read past the cache are identical"
        in res.output
    )
    table, _ = read_table(out)
    assert all(len(v) == 3 and len(set(v)) == 1 for v in table[REPEATS_COLUMN])
    bad = CliRunner().invoke(app, [*args, "--mode", "pointwise", "--repeats", "2"])
    assert bad.exit_code == 2 and "--repeats" in bad.output
