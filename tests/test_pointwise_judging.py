"""Pointwise judging: the score distribution read through score_options (the "10" split), the
parsed fall-back counted, off-format answers excluded, the cache, the table's validation and import."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from judgebias.backends.call_cache import CachedBackend, ResponseCache
from judgebias.backends.protocol import Generation, OptionScores, TokenLogprobs
from judgebias.engine.pointwise import (
    PARSED_NO_LOGPROBS,
    ScoreItem,
    find_score,
    items_from_frame,
    judge_responses,
)
from judgebias.prompts.pointwise import MTBENCH_SINGLE, RUBRIC_5
from judgebias.tables.pairwise import TableError
from judgebias.tables.pointwise import validate_pointwise

DIGITS = [str(k) for k in range(1, 10)]


def _dist(**p: float) -> dict[str, float]:
    return {d: p.get(f"p{d}", 0.0) for d in DIGITS}


class ScriptedScorer:
    """Texts and option scores keyed by the response being judged; the "[[1" read separately."""

    name = "scripted"
    is_chat = True

    def __init__(self, texts, first, ten=None):
        self.texts, self.first, self.ten = texts, first, ten or {}
        self.options_asked: list[tuple[str, ...]] = []

    def identity(self) -> dict:
        return {"backend": "scripted-pointwise"}

    @staticmethod
    def _response(prompt) -> str:
        content = prompt.messages[-1].content
        for marker in ("[The Start of Assistant's Answer]\n", "###Response to grade:\n"):
            if marker in content:
                return content.split(marker, 1)[1].split("\n", 1)[0]
        raise AssertionError(content)

    def score_options(self, prompts, options):
        self.options_asked.append(tuple(options))
        table = self.ten if options == ("0", "9") else self.first
        return [table[self._response(p)] for p in prompts]

    def generate(self, prompts, params):
        return [Generation(text=self.texts[self._response(p)]) for p in prompts]

    def continuation_logprobs(self, contexts, continuations):
        return [TokenLogprobs(()) for _ in continuations]


def _item(response: str, **kw) -> ScoreItem:
    return ScoreItem(item_id=response, prompt="question", response=response, **kw)


def test_ten_is_split_off_one_by_the_second_read():
    # First read over 1..9 (normalized): P(1) 0.5, P(7) 0.35, P(8) 0.15, mass 0.9. Second read at
    # "[[1": "0" has 0.8 of a mass of 0.5, raw P("0" | "1") = q = 0.4. So P(1) = 0.5*0.6 = 0.3,
    # P(10) = 0.5*0.4 = 0.2; expected 0.3*1 + 0.35*7 + 0.15*8 + 0.2*10 = 5.95; argmax 7.
    backend = ScriptedScorer(
        texts={"good": "Fine answer. Rating: [[7]]"},
        first={"good": OptionScores(_dist(p1=0.5, p7=0.35, p8=0.15), mass=0.9)},
        ten={"good": OptionScores({"0": 0.8, "9": 0.2}, mass=0.5)},
    )
    (row,) = judge_responses([_item("good", generator="m")], backend, MTBENCH_SINGLE).rows
    assert row["score"] == pytest.approx(5.95) and row["score_argmax"] == 7.0
    assert row["score_dist"] == pytest.approx([0.3, 0, 0, 0, 0, 0, 0.35, 0.15, 0, 0.2])
    assert row["score_parsed"] == 7.0 and row["score_source"] == "probabilities"
    assert (row["scale_min"], row["scale_max"], row["mass"]) == (1, 10, 0.9)
    assert row["template_version"] == "mtbench-single@single-v1:chat"
    assert backend.options_asked == [tuple(DIGITS), ("0", "9")]


def test_no_logprobs_gives_the_parsed_integer_counted_and_off_format_is_excluded():
    # An API without log-probabilities: the option read is a verdict (verdict_only), so the score is
    # the integer in the text, counted under its reason; an answer with no "[[" has no score at all.
    verdict = OptionScores({d: float(d == "6") for d in DIGITS}, verdict_only=True)
    backend = ScriptedScorer(
        texts={"api": "Rating: [[6]]", "rambling": "I think it is fine."},
        first={"api": verdict},
        ten={"api": OptionScores({"0": math.nan, "9": math.nan}, error="no logprobs", verdict_only=True)},
    )
    result = judge_responses([_item("api"), _item("rambling")], backend, MTBENCH_SINGLE)
    api, rambling = result.rows
    assert api["score"] == 6.0 and api["score_argmax"] == 6.0 and api["score_source"] == "parsed"
    assert api["score_dist"] is None and api["judge_error"] is None
    assert math.isnan(rambling["score"]) and rambling["score_source"] is None
    assert "off-format: no score after '[['" in rambling["judge_error"]
    assert result.exclusions.counts[PARSED_NO_LOGPROBS] == 1
    assert sum(result.exclusions.counts.values()) == 2


def test_rubric_five_needs_no_second_read_and_rows_validate(tmp_path):
    # [RESULT] then P(4) 0.6, P(5) 0.4: expected 4.4, argmax 4; no read at "1" on a 1..5 scale.
    backend = ScriptedScorer(
        texts={"ok": "Feedback: mostly right. [RESULT] 4"},
        first={"ok": OptionScores({"1": 0, "2": 0, "3": 0, "4": 0.6, "5": 0.4}, mass=0.7)},
    )
    result = judge_responses([_item("ok", human_scores=(4.0, 5.0))], backend, RUBRIC_5)
    (row,) = result.rows
    assert row["score"] == pytest.approx(4.4) and row["score_argmax"] == 4.0
    assert backend.options_asked == [("1", "2", "3", "4", "5")]
    table, _ = validate_pointwise(result.table())
    assert table.loc[0, "human_scores"] == [4.0, 5.0]
    # Cached by content: a second run over the same cache calls the backend for nothing.
    cached = CachedBackend(backend, ResponseCache(tmp_path))
    first = judge_responses([_item("ok")], cached, RUBRIC_5).rows
    again = CachedBackend(backend, ResponseCache(tmp_path))
    assert judge_responses([_item("ok")], again, RUBRIC_5).rows[0]["score"] == first[0]["score"]
    assert again.calls == 0 and again.hits > 0


def test_find_score_takes_the_last_well_formed_rating():
    text = 'The format is "Rating: [[5]]". My rating: [[8]]'
    pos, parsed, error = find_score(text, "[[")
    assert (parsed, error) == (8.0, None) and text[:pos].endswith("My rating: [[")
    assert find_score("<think>[[3]]", "[[")[2] == "off-format: unfinished <think> block"
    assert find_score("Feedback: ok [RESULT] 3", "[RESULT]")[1] == 3.0


def test_validation_names_row_and_field():
    rows = pd.DataFrame(
        [
            dict(item_id="a", prompt="p", response="r", judge="j", score=11, scale_min=1, scale_max=10),
            dict(
                item_id="b",
                prompt="p",
                response="",
                judge="j",
                score=5,
                scale_min=1,
                scale_max=10,
                score_dist=[0.5, 0.5],
                human_scores="[3, 12]",
            ),
            dict(item_id="c", prompt="p", response="r", judge="", score=3, scale_min=5, scale_max=1),
            dict(item_id="a", prompt="p", response="r", judge="j", score=2, scale_min=1, scale_max=10),
        ]
    )
    with pytest.raises(TableError) as err:
        validate_pointwise(rows, source="t.jsonl")
    message = str(err.value)
    for expected in (
        "row 1, field 'score': 11 is outside the scale 1..10",
        "row 2, field 'response': is empty",
        "row 2, field 'score_dist': 2 probabilities for the 10 scores 1..10",
        "row 2, field 'human_scores': 12 is outside the scale 1..10",
        "row 3, field 'scale_max': the scale must be two integers",
        "row 4, field 'item_id': 'a' appears twice",
    ):
        assert expected in message, message
    kept, excl = validate_pointwise(rows, skip_invalid=True)
    assert kept.empty and excl.total == 4


def test_import_table_reads_a_pointwise_file_and_items_come_from_pairs_too(tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app

    src = tmp_path / "scores.jsonl"
    rows = [
        dict(
            item_id="x",
            prompt="p",
            response="r1",
            generator="g",
            judge="j",
            score=7.5,
            score_dist=[0] * 6 + [0.5, 0.5, 0, 0],
            scale_min=1,
            scale_max=10,
            human_scores=[8],
        )
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    res = CliRunner().invoke(app, ["import", "table", str(src), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "pointwise rows: 1" in res.output and "rows with human scores: 1" in res.output
    pairs = pd.DataFrame(
        [
            dict(prompt="p", response_a="r1", response_b="r2", generator_a="g", generator_b="h"),
            dict(prompt="p", response_a="r2", response_b="r1", generator_a="h", generator_b="g"),
        ]
    )
    items = items_from_frame(pairs)
    assert [(i.response, i.generator) for i in items] == [("r1", "g"), ("r2", "h")]


def test_mt_bench_single_judgments_import_as_a_pointwise_table(tmp_path):
    from judgebias.importers import import_dataset
    from judgebias.importers.mt_bench_single import NO_RATING
    from judgebias.prompts.pointwise import SINGLE_MATH_V1, SINGLE_V1

    # FastChat's layout: data/mt_bench/question.jsonl and data/mt_bench/model_judgment/*_single.jsonl.
    root = tmp_path / "mt_bench"
    (root / "model_judgment").mkdir(parents=True)
    (root / "question.jsonl").write_text(json.dumps({"question_id": 81, "category": "writing"}) + "\n")
    records = [
        dict(
            question_id=81,
            model="m1",
            judge=["gpt-4", "single-v1"],
            turn=1,
            score=8.0,
            judgment="Rating: [[8]]",
            user_prompt=SINGLE_V1.format(question="Write a blog post.", answer="Hawaii is\n\nlovely."),
        ),
        dict(
            question_id=111,
            model="m1",
            judge=["gpt-4", "single-math-v1"],
            turn=1,
            score=-1,
            judgment="?",
            user_prompt=SINGLE_MATH_V1.format(question="Area?", ref_answer_1="3", answer="4"),
        ),
        dict(
            question_id=81,
            model="m1",
            judge=["gpt-4", "single-v1-multi-turn"],
            turn=2,
            score=5.0,
            judgment="",
            user_prompt="<|The Start of Assistant A's Conversation with User|>",
        ),
    ]
    src = root / "model_judgment" / "gpt-4_single.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    table, excl = import_dataset("mt-bench-single", src)
    assert list(table["item_id"]) == ["mt-bench/81/m1/turn1", "mt-bench/111/m1/turn1"]
    first, math_row = table.iloc[0], table.iloc[1]
    assert (first["prompt"], first["response"], first["score"]) == (
        "Write a blog post.",
        "Hawaii is\n\nlovely.",
        8.0,
    )
    assert (
        first["category"] == "writing"
        and first["judge"] == "gpt-4"
        and first["criterion"] == "overall quality"
    )
    assert (
        math.isnan(math_row["score"])
        and math_row["judge_error"] == NO_RATING
        and math_row["reference"] == "3"
    )
    assert excl.counts == {NO_RATING: 1, "second turn (a conversation, not one answer)": 1}


def test_bounded_score_tokens_fall_back_to_the_parsed_integer_and_raw_probability_reads_bounds():
    from judgebias.engine.pointwise import PARSED_BOUNDS, raw_probability

    # Some digits outside an endpoint's top log-probs: only bounds, so the text's integer, counted.
    bounds = {d: [0.0, 0.01] for d in DIGITS} | {"8": [0.9, 0.99]}
    backend = ScriptedScorer(
        texts={"api": "Rating: [[8]]"},
        first={"api": OptionScores(dict.fromkeys(DIGITS, math.nan), mass=0.95, bounds=bounds)},
        ten={"api": OptionScores({"0": 0.1, "9": 0.9}, mass=0.2)},
    )
    result = judge_responses([_item("api")], backend, MTBENCH_SINGLE)
    assert result.rows[0]["score"] == 8.0 and result.rows[0]["score_source"] == "parsed"
    assert result.exclusions.counts == {PARSED_BOUNDS: 1}
    # raw P("0") = share x mass = 0.1 x 0.2; a listed bounded option: its upper share x mass
    # (0.5 x 0.3); an unlisted one (lower bound 0) counts 0.
    assert raw_probability(OptionScores({"0": 0.1, "9": 0.9}, mass=0.2), "0") == pytest.approx(0.02)
    listed = OptionScores({"0": math.nan, "9": math.nan}, mass=0.3, bounds={"0": [0.4, 0.5], "9": [0.0, 0.1]})
    assert raw_probability(listed, "0") == pytest.approx(0.15) and raw_probability(listed, "9") == 0.0


def test_direct_template_reads_the_score_without_generating():
    from judgebias.prompts.pointwise import MTBENCH_SINGLE_DIRECT

    class NoGeneration(ScriptedScorer):
        def generate(self, prompts, params):
            raise AssertionError("a direct template generates nothing")

    # P(9) 0.5, P(1) 0.5 at "Rating: [["; at "[[1", raw P("0") = 1.0 x 1.0: all of "1" is "10".
    # Expected 0.5*9 + 0.5*10 = 9.5.
    backend = NoGeneration(
        texts={},
        first={"r": OptionScores(_dist(p1=0.5, p9=0.5), mass=0.6, raw="1")},
        ten={"r": OptionScores({"0": 1.0, "9": 0.0}, mass=1.0)},
    )
    (row,) = judge_responses([_item("r")], backend, MTBENCH_SINGLE_DIRECT).rows
    assert row["score"] == pytest.approx(9.5) and row["score_argmax"] in (9.0, 10.0)
    assert row["raw_output"] == "Rating: [[1" and math.isnan(row["score_parsed"])
    assert row["template_version"] == "mtbench-single-direct@single-v1-direct:chat"


def test_criteria_template_scores_one_criterion_per_call_and_rows_validate():
    from judgebias.engine.pointwise import items_from_frame, with_criteria
    from judgebias.prompts.pointwise import CRITERIA_5, pointwise_template

    assert pointwise_template("criteria-5") is CRITERIA_5
    prompt = CRITERIA_5.build("question", "an answer", criterion="conciseness")
    user = prompt.messages[-1].content
    assert "ONE criterion only: conciseness" in user and "###Criterion:\nconciseness" in user

    class ByCriterion(ScriptedScorer):
        """Scores keyed by the criterion the prompt names: the read must follow the criterion."""

        @staticmethod
        def _response(prompt) -> str:
            return prompt.messages[-1].content.split("###Criterion:\n", 1)[1].split("\n", 1)[0]

    five = ("1", "2", "3", "4", "5")
    backend = ByCriterion(
        texts={"accuracy": "Feedback: right. [RESULT] 5", "conciseness": "Feedback: long. [RESULT] 2"},
        first={"accuracy": OptionScores(dict(zip(five, (0, 0, 0, 0.5, 0.5), strict=True)), mass=0.9),
               "conciseness": OptionScores(dict(zip(five, (0, 1.0, 0, 0, 0), strict=True)), mass=0.9)},
    )
    items = with_criteria([_item("r1"), _item("r2")], ["accuracy", "conciseness"])
    assert [(it.item_id, it.criterion) for it in items] == [
        ("r1", "accuracy"), ("r1", "conciseness"), ("r2", "accuracy"), ("r2", "conciseness")]
    result = judge_responses(items, backend, CRITERIA_5)
    # accuracy: 0.5 * 4 + 0.5 * 5 = 4.5; conciseness: 2.
    assert [(r["criterion"], r["score"]) for r in result.rows] == [
        ("accuracy", 4.5), ("conciseness", 2.0), ("accuracy", 4.5), ("conciseness", 2.0)]
    table, _ = validate_pointwise(result.table())  # one row per (item, judge, criterion): no duplicate
    assert len(table) == 4
    # Read back, a table with two criteria per item gives one judgment per (item, criterion).
    assert len(items_from_frame(table)) == 4
    with pytest.raises(ValueError, match="distinct non-empty"):
        with_criteria(items, ["accuracy", " accuracy"])
    # The direct variant generates nothing and reads the score right after the forced "[RESULT]".
    from judgebias.prompts.pointwise import CRITERIA_5_DIRECT

    direct = judge_responses(items[:2], backend, CRITERIA_5_DIRECT)
    assert [(r["criterion"], r["score"]) for r in direct.rows] == [("accuracy", 4.5), ("conciseness", 2.0)]
    assert direct.rows[0]["raw_output"].startswith("[RESULT]")
