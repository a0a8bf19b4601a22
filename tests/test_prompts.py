"""Prompt templates: text fidelity to their sources, layout, versions; verdict parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judgebias.engine.pairwise import OFF_FORMAT, find_verdict, strip_think
from judgebias.prompts import (
    DBG_AB,
    DBG_GENERATE,
    DBG_TRUTHFUL,
    JUDGE_TEMPLATES,
    MTBENCH_PAIR,
    judge_template,
)
from judgebias.prompts import examples as ex

DATA = Path(__file__).parent / "data" / "prompts"


def test_mtbench_pair_v2_is_fastchats_text():
    source = json.loads((DATA / "pair-v2.json").read_text())
    p = MTBENCH_PAIR.build("Q?", "first answer", "second answer")
    (system, user) = p.messages
    assert (system.role, system.content) == ("system", source["system_prompt"])
    assert user.content == source["prompt_template"].format(question="Q?", answer_a="first answer",
                                                             answer_b="second answer")
    assert MTBENCH_PAIR.explain_first and MTBENCH_PAIR.options == ("A", "B", "C")


def test_mtbench_has_no_base_model_variant():
    with pytest.raises(ValueError, match="no pre-trained"):
        MTBENCH_PAIR.build("q", "a", "b", chat=False)


@pytest.mark.parametrize("template", [DBG_AB, DBG_TRUTHFUL])
def test_dbg_chat_prompt_is_one_user_turn_with_both_responses_in_order(template):
    p = template.build("What is 2+2?", "FIRST", "SECOND")
    assert len(p.messages) == 1 and p.messages[0].role == "user"
    text = p.messages[0].content
    assert "# Query\nWhat is 2+2?" in text
    assert text.index("<Response A>FIRST</Response A>") < text.index("<Response B>SECOND</Response B>")
    assert "output A or B" in text


@pytest.mark.parametrize("template, shots", [(DBG_AB, ex.JUDGE_HELPFUL), (DBG_TRUTHFUL, ex.JUDGE_TRUTHFUL)])
def test_dbg_fewshot_prompt_has_two_examples_and_ends_at_the_judgment(template, shots):
    p = template.build("Q?", "FIRST", "SECOND", chat=False)
    assert p.text is not None and not p.messages
    assert p.text.startswith("# Instruction\n")
    assert p.text.endswith("# Query\nQ?\n\n# Responses\n<Response A>FIRST</Response A>\n"
                           "<Response B>SECOND</Response B>\n\n# Judgment\n")
    assert p.text.count("# Judgment\n") == 3
    for _query, a, b, verdict in shots:
        block = f"<Response A>{a}</Response A>\n<Response B>{b}</Response B>\n\n# Judgment\n{verdict}"
        assert block in p.text
    # The examples must not teach a position: one says A, the other B.
    assert sorted(v for *_, v in shots) == ["A", "B"]


def test_generation_prompts():
    chat = DBG_GENERATE.build("Name a fruit.")
    assert "# Query\nName a fruit." in chat.messages[0].content
    assert "within 200 words" in chat.messages[0].content
    raw = DBG_GENERATE.build("Name a fruit.", chat=False)
    assert raw.text.endswith("# Query\nName a fruit.\n\n# Answer\n")
    assert raw.text.count("# Answer\n") == 4  # 3 examples + the test query
    assert DBG_GENERATE.stop(chat=False) and DBG_GENERATE.stop(chat=True) == ()


def test_tags_name_template_version_and_variant():
    tags = {t.tag(chat) for t in JUDGE_TEMPLATES.values() for chat in (True, False)}
    assert len(tags) == 2 * len(JUDGE_TEMPLATES)
    assert DBG_AB.tag(True) == "dbg-ab@1:chat" and DBG_AB.tag(False) == "dbg-ab@1:fewshot"
    assert MTBENCH_PAIR.tag(True) == "mtbench-pair@pair-v2:chat"
    with pytest.raises(ValueError, match="unknown judge template"):
        judge_template("nope")


@pytest.mark.parametrize("text, letter", [
    ("Assistant A is correct. [[A]]", "A"),
    ('Output "[[A]]" if A is better. Here B is right, so [[B]]', "B"),  # the last verdict counts
    ("Both fine. [[ C ]]", "C"),
    ("<think>maybe [[A]]</think>Final: [[B]]", "B"),
])
def test_find_verdict_reads_the_final_bracketed_letter(text, letter):
    pos, found, error = find_verdict(text)
    assert error is None and found == letter
    assert text[:pos].endswith("[[")


def test_find_verdict_bare_brackets_and_off_format():
    pos, letter, error = find_verdict("Verdict: [[")
    assert (pos, letter, error) == (len("Verdict: [["), None, None)
    assert find_verdict("I prefer A.") == (None, None, OFF_FORMAT)
    assert find_verdict("<think>[[A]]</think> A is better") == (None, None, OFF_FORMAT)
    assert find_verdict("<think>still thinking [[A]]")[2] == "off-format: unfinished <think> block"
    assert strip_think("<think>x</think>rest") == ("rest", len("<think>x</think>"), None)
