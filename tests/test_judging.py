"""The judging engine: both orders, order undoing and averaging, explain-first parsing, exclusions,
cache integration, the ``judgebias judge`` command; one slow test on the real SmolLM2 judge."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from judgebias.backends import loading as models
from judgebias.backends.call_cache import CachedBackend, ResponseCache
from judgebias.backends.protocol import Generation, GenerationParams, OptionScores, Prompt, TokenLogprobs
from judgebias.backends.random_weights import random_model
from judgebias.engine.pairwise import OFF_FORMAT, judge_pairs, pairs_from_table
from judgebias.prompts import DBG_AB, MTBENCH_PAIR
from judgebias.tables.files import read_table
from judgebias.tables.pairwise import validate
from judgebias.tables.records import Pair

DATA = Path(__file__).parent / "data" / "local_judge" / "llmbar_mtbench_4.jsonl"
ALIAS = "smollm2-135m-instruct"


def _pair(i: int, a: str = "good answer", b: str = "bad answer") -> Pair:
    prompt = f"question {i}"
    return Pair(pair_id=Pair.make_id(prompt, a, b), prompt=prompt, response_a=a, response_b=b, human=("a",))


class ScriptedBackend:
    """Answers from dicts keyed by the response shown first (prompts are built by real templates)."""

    name = "scripted"
    is_chat = True

    def __init__(self, scores=None, texts=None, second=None):
        self.scores, self.texts, self.second = scores or {}, texts or {}, second or {}
        self.scored: list[Prompt] = []

    def identity(self) -> dict:
        return {"backend": "scripted"}

    @staticmethod
    def _first(prompt: Prompt) -> str:
        content = prompt.messages[-1].content
        for marker in ("<Response A>", "[The Start of Assistant A's Answer]\n"):
            if marker in content:
                return content.split(marker, 1)[1].split("<", 1)[0].split("\n", 1)[0]
        raise AssertionError(content)

    def score_options(self, prompts, options):
        self.scored.extend(prompts)
        out = []
        for p in prompts:
            table = self.second if p.assistant_prefix else self.scores
            out.append(table[self._first(p)])
        return out

    def generate(self, prompts, params):
        return [Generation(text=self.texts[self._first(p)]) for p in prompts]

    def continuation_logprobs(self, contexts, continuations):
        return [TokenLogprobs((-1.0,) * len(c.split())) for c in continuations]


def test_both_orders_are_undone_and_averaged():
    # ab shows A first: P(first)=0.8 -> p_a_ab 0.8. ba shows B first: P(first)=0.6 -> P(A)=0.4.
    # p_a = (0.8 + 0.4) / 2 = 0.6 -> verdict a.
    backend = ScriptedBackend(scores={
        "good answer": OptionScores({"A": 0.8, "B": 0.2}, mass=0.9, raw="A"),
        "bad answer": OptionScores({"A": 0.6, "B": 0.4}, mass=0.5, raw="A"),
    })
    result = judge_pairs([_pair(1)], backend, DBG_AB)
    (row,) = result.rows
    assert row["p_a_ab"] == pytest.approx(0.8) and row["p_a_ba"] == pytest.approx(0.4)
    assert row["p_a"] == pytest.approx(0.6) and row["verdict"] == "a"
    assert (row["verdict_ab"], row["verdict_ba"]) == ("a", "b")
    assert (row["mass_ab"], row["mass_ba"]) == (0.9, 0.5)
    assert row["template_version"] == "dbg-ab@1:chat" and row["judge"] == "scripted"
    assert [j.order for j in result.judgments] == ["ab", "ba"]
    validate(result.table())


def test_failed_or_unreadable_order_excludes_the_pair_with_its_reason():
    backend = ScriptedBackend(scores={
        "good answer": OptionScores({"A": 0.7, "B": 0.3}, mass=0.2),
        "bad answer": OptionScores({"A": math.nan, "B": math.nan}, raw="The"),
    })
    result = judge_pairs([_pair(1)], backend, DBG_AB)
    (row,) = result.rows
    assert math.isnan(row["p_a"]) and row["verdict"] is None
    assert row["p_a_ab"] == pytest.approx(0.7)
    assert row["judge_error"].startswith("ba: off-format")
    assert result.exclusions.total == 1


def test_verdict_only_scores_are_not_averaged_as_probabilities():
    backend = ScriptedBackend(scores={
        "good answer": OptionScores({"A": 1.0, "B": 0.0}, verdict_only=True, raw="A"),
        "bad answer": OptionScores({"A": 1.0, "B": 0.0}, verdict_only=True, raw="A"),
    })
    (row,) = judge_pairs([_pair(1)], backend, DBG_AB).rows
    # Position-bound judge: "first" both times -> a then b in original terms -> a tie.
    assert math.isnan(row["p_a"]) and (row["verdict_ab"], row["verdict_ba"]) == ("a", "b")
    assert row["verdict"] == "tie"


def test_explain_first_reads_probabilities_after_the_final_brackets():
    backend = ScriptedBackend(
        texts={"good answer": "A is right. [[A]]", "bad answer": "The second is better: [[B]]"},
        second={"good answer": OptionScores({"A": 0.6, "B": 0.2, "C": 0.2}, mass=0.9),
                "bad answer": OptionScores({"A": 0.1, "B": 0.3, "C": 0.6}, mass=0.8)})
    result = judge_pairs([_pair(1)], backend, MTBENCH_PAIR, params=GenerationParams(max_new_tokens=32))
    (row,) = result.rows
    # ab: P(A)/(P(A)+P(B)) = 0.6/0.8 = 0.75. ba: first shown is B; P(first) = 0.1/0.4 = 0.25 -> P(A) = 0.75.
    assert row["p_a_ab"] == pytest.approx(0.75) and row["p_a_ba"] == pytest.approx(0.75)
    assert row["p_a"] == pytest.approx(0.75)
    assert row["p_tie_ba"] == pytest.approx(0.6)
    prefixes = sorted(p.assistant_prefix for p in backend.scored)
    assert prefixes == ["A is right. [[", "The second is better: [["]
    assert row["raw_ab"] == "A is right. [[A]]"
    assert (row["verdict_ab"], row["verdict_ba"]) == ("a", "a")


def test_explain_first_without_brackets_is_an_exclusion_never_half():
    backend = ScriptedBackend(texts={"good answer": "I like the first one.", "bad answer": "[[B]]"},
                              second={"bad answer": OptionScores({"A": 0.2, "B": 0.8, "C": 0.0}, mass=1.0)})
    result = judge_pairs([_pair(1)], backend, MTBENCH_PAIR)
    (row,) = result.rows
    assert math.isnan(row["p_a"]) and row["verdict"] is None
    assert row["judge_error"] == f"ab: {OFF_FORMAT}"
    assert result.exclusions.to_dict() == {OFF_FORMAT: 1}


def test_cached_backend_reuses_every_call(tmp_path):
    backend = ScriptedBackend(scores={
        "good answer": OptionScores({"A": 0.8, "B": 0.2}, mass=0.9),
        "bad answer": OptionScores({"A": 0.6, "B": 0.4}, mass=0.5)})
    pairs = [_pair(i) for i in range(3)]
    cached = CachedBackend(backend, ResponseCache(tmp_path))
    first = judge_pairs(pairs, cached, DBG_AB).rows
    assert (cached.calls, cached.hits) == (6, 0)
    again = judge_pairs(pairs, CachedBackend(backend, ResponseCache(tmp_path)), DBG_AB).rows
    assert [r["p_a"] for r in again] == [r["p_a"] for r in first]
    assert len(backend.scored) == 6  # the second run computed nothing


def test_pairs_from_table_are_unique_and_keep_human_labels():
    df, _ = read_table(DATA)
    two_judges = validate(__import__("pandas").concat([df.assign(judge="x"), df.assign(judge="y")]))[0]
    pairs = pairs_from_table(two_judges)
    assert [p.pair_id for p in pairs] == list(df["pair_id"])
    assert all(p.human in (("a",), ("b",)) for p in pairs)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A tiny random Llama saved as a plain local model folder (what a user's fine-tune looks like)."""
    folder = tmp_path_factory.mktemp("tiny-judge")
    tok = models.load_tokenizer(ALIAS)
    lm = random_model("tiny-llama", tokenizer=tok, seed=1, device="cpu", initializer_range=0.2)
    lm.model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_cli_judge_writes_a_table_analyze_reads(tiny_folder, tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app

    out = tmp_path / "judged.jsonl"
    args = ["judge", str(DATA), "--judge", str(tiny_folder), "--out", str(out), "--name", "tiny",
            "--perplexity", "--cache-dir", str(tmp_path / "cache"), "--device", "cpu"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    table, excl = read_table(out)
    assert excl.total == 0 and len(table) == 4 and set(table["judge"]) == {"tiny"}
    assert table["p_a"].between(0, 1).all() and table["p_a_ab"].notna().all()
    assert (table["ppl_a"] > 1).all() and (table["ppl_b"] > 1).all()
    assert list(table["human"]) == [list(h) for h in read_table(DATA)[0]["human"]]
    assert "source" in table.columns  # pair-level extras travel along
    again = CliRunner().invoke(app, args)
    assert "cache hits 16, computed 0" in again.output  # 8 scores + 8 perplexities, all cached
    assert read_table(out)[0]["p_a"].tolist() == table["p_a"].tolist()


@pytest.fixture(scope="session")
def smollm2():
    from judgebias.backends.local import LocalBackend

    return LocalBackend(ALIAS, device="cpu")


@pytest.mark.slow
def test_real_smollm2_judges_real_pairs(smollm2):
    df, _ = read_table(DATA)
    pairs = pairs_from_table(df)[:3]
    result = judge_pairs(pairs, smollm2, DBG_AB)
    assert not result.exclusions.total
    for row in result.rows:
        for key in ("p_a", "p_a_ab", "p_a_ba"):
            assert 0.0 <= row[key] <= 1.0
        assert 0.0 < row["mass_ab"] <= 1.0
    from judgebias.engine.perplexity import fill_perplexity

    ppl = fill_perplexity(result.table(), smollm2)
    assert ppl["ppl_a"].map(math.isfinite).all() and (ppl["ppl_a"] > 1).all()
    assert ppl["ppl_error"].isna().all()


def test_cli_explain_first_off_format_is_counted_not_scored(tiny_folder, tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app

    out = tmp_path / "mt.jsonl"
    res = CliRunner().invoke(app, ["judge", str(DATA), "--judge", str(tiny_folder), "--out", str(out),
                                   "--template", "mtbench-pair", "--max-new-tokens", "6", "--no-cache",
                                   "--device", "cpu"])
    assert res.exit_code == 0, res.output
    table, _ = read_table(out)
    # A random-weights judge never writes "[[": every pair is excluded with the reason, none is 0.5.
    assert table["p_a"].isna().all() and table["verdict"].isna().all()
    assert table["judge_error"].str.contains("off-format: no \\[\\[A\\]\\]/\\[\\[B\\]\\] verdict").all()
    assert f"{OFF_FORMAT}: 8" in res.output
    assert set(table["template_version"]) == {"mtbench-pair@pair-v2:chat"}


def test_a_bounded_probability_keeps_the_verdict_and_leaves_the_value_out():
    # ab: P(first) in [0.99, 1] -> verdict a, no P(A). ba: an ordinary P(first) = 0.3 -> P(A) = 0.7.
    # The row: p_a_ab NaN, p_a NaN (no average with a bound), verdict from agree-else-tie: a and a.
    # Bounds in original terms: ab [0.99, 1]; ba measured 0.7 -> [0.7, 0.7].
    backend = ScriptedBackend(scores={
        "good answer": OptionScores({"A": math.nan, "B": math.nan}, mass=0.98, raw="A",
                                    bounds={"A": [0.99, 1.0], "B": [0.0, 0.01]}),
        "bad answer": OptionScores({"A": 0.3, "B": 0.7}, mass=0.9, raw="B"),
    })
    result = judge_pairs([_pair(1)], backend, DBG_AB)
    (row,) = result.rows
    assert math.isnan(row["p_a_ab"]) and row["p_a_ba"] == pytest.approx(0.7) and math.isnan(row["p_a"])
    assert (row["verdict_ab"], row["verdict_ba"], row["verdict"]) == ("a", "a", "a")
    assert row["fold_rule"] == "agree-else-tie" and row["judge_error"] is None
    assert (row["p_a_low_ab"], row["p_a_high_ab"]) == (0.99, 1.0)
    assert row["p_a_low_ba"] == pytest.approx(0.7) and row["p_a_high_ba"] == pytest.approx(0.7)
    (reason,) = result.exclusions.counts
    assert reason.startswith("probability left out, verdict kept") and result.exclusions.counts[reason] == 1


def test_a_bound_spanning_one_half_is_no_verdict():
    # ba shows B first with P(first) in [0.4, 1.0]: spans 0.5, so neither verdict nor value.
    backend = ScriptedBackend(scores={
        "good answer": OptionScores({"A": 0.8, "B": 0.2}, mass=0.9, raw="A"),
        "bad answer": OptionScores({"A": math.nan, "B": math.nan}, raw="A", bounds={"A": [0.4, 1.0]}),
    })
    (row,) = judge_pairs([_pair(1)], backend, DBG_AB).rows
    assert "only bounded in [0.400, 1.000]" in row["judge_error"] and row["verdict"] is None
    # In original terms the ba bound [0.4, 1] on B-first is P(A) in [0, 0.6].
    assert row["p_a_low_ba"] == pytest.approx(0.0) and row["p_a_high_ba"] == pytest.approx(0.6)
