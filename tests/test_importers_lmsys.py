"""The Chatbot Arena and MT-Bench human-judgment importers on local files in those datasets' real
schema (rows copied from the public releases), and on bad input."""

from __future__ import annotations

import json
import sys
import types

import pandas as pd
import pytest
from test_importers import _row

from judgebias.importers import import_dataset
from judgebias.tables.pairwise import TableError, human_label

# --- Arena / MT-Bench human (local files in the datasets' real schema) -----------------------------

def _conv(*turns: str) -> list[dict]:
    roles = ["user", "assistant"] * len(turns)
    return [{"role": r, "content": t} for r, t in zip(roles, turns, strict=False)]


ARENA_ROWS = [
    {"question_id": "58210e39b3fd4441a2bd4a518bb44c2d", "model_a": "chatglm-6b", "model_b": "koala-13b",
     "winner": "model_b", "judge": "arena_user_973", "turn": 1, "anony": True, "language": "English",
     "tstamp": 1682351591.1322,
     "conversation_a": _conv("What is the difference between OpenCL and CUDA?", "OpenCL and CUDA are ..."),
     "conversation_b": _conv("What is the difference between OpenCL and CUDA?", "Both are ...")},
    {"question_id": "2564acd09e3942fd97657d05282d4389", "model_a": "oasst-pythia-12b",
     "model_b": "alpaca-13b",
     "winner": "tie (bothbad)", "judge": "arena_user_973", "turn": 1, "anony": True, "language": "English",
     "tstamp": 1682351654.6747,
     "conversation_a": _conv("Why did my parent not invite me to their wedding?", "It is possible that ..."),
     "conversation_b": _conv("Why did my parent not invite me to their wedding?", "It is likely that ...")},
    {"question_id": "90bfd142157948aba01931726c888e7f", "model_a": "koala-13b", "model_b": "oasst-pythia-12b",
     "winner": "model_a", "judge": "arena_user_973", "turn": 2, "anony": True, "language": "English",
     "tstamp": 1682351708.9616,
     "conversation_a": _conv("Fuji vs. Nikon, which is better?", "Both are good.", "Why?", "Because ..."),
     "conversation_b": _conv("Fuji vs. Nikon, which is better?", "It depends.", "Why?", "Well ...")},
    {"question_id": "a7c5accc53e649a3bc6b2e41d962ebc4", "model_a": "vicuna-13b", "model_b": "koala-13b",
     "winner": "tie", "judge": "arena_user_1", "turn": 2, "anony": True, "language": "English",
     "tstamp": 1682351800.0,
     "conversation_a": _conv("Hi", "Hello!", "Tell me a joke", "Knock knock"),
     "conversation_b": _conv("Hi", "Hey.", "Tell me a story", "Once upon a time")},
]


def test_arena_local_jsonl(tmp_path):
    path = tmp_path / "arena.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ARENA_ROWS) + "\n")
    df, excl = import_dataset("arena", path)
    assert excl.to_dict() == {"recoded:winner_tie_bothbad": 1, "user_turns_differ_between_sides": 1}
    assert len(df) == 3 and df["judge"].isna().all()
    r = _row(df, "arena/58210e39b3fd4441a2bd4a518bb44c2d")
    assert (r.generator_a, r.generator_b, list(r.human)) == ("chatglm-6b", "koala-13b", ["b"])
    assert list(_row(df, "arena/2564acd09e3942fd97657d05282d4389").human) == ["tie"]
    multi = _row(df, "arena/90bfd142157948aba01931726c888e7f")
    assert multi.prompt == "Fuji vs. Nikon, which is better?"
    assert multi.response_a == "Both are good.\n\nUser: Why?\n\nAssistant: Because ..."
    first_only, excl = import_dataset("arena", path, turns="first")
    assert len(first_only) == 2 and excl.counts["multi_turn_left_out"] == 2


def test_arena_parquet_and_repeated_vote(tmp_path):
    rows = [*ARENA_ROWS[:2], {**ARENA_ROWS[0], "judge": "arena_user_5", "winner": "model_a"}]
    path = tmp_path / "arena.parquet"
    pd.DataFrame(rows).to_parquet(path)
    df, _ = import_dataset("arena", path)
    r = _row(df, "arena/58210e39b3fd4441a2bd4a518bb44c2d")
    assert list(r.human) == ["b", "a"] and list(r.annotators) == ["arena_user_973", "arena_user_5"]
    assert human_label(df[df["pair_id"] == r.pair_id]).isna().all()  # 1 vs 1: no majority


def test_arena_missing_field_and_hub_path(tmp_path, monkeypatch):
    path = tmp_path / "arena.jsonl"
    path.write_text(json.dumps({k: v for k, v in ARENA_ROWS[0].items() if k != "winner"}) + "\n")
    with pytest.raises(TableError, match=r"(?s)arena.jsonl.*row 1, field 'winner': missing"):
        import_dataset("arena", path)
    # the hub path, with datasets.load_dataset stood in for (no network in tests)
    calls = []

    def fake_load_dataset(repo, split):
        calls.append((repo, split))
        return ARENA_ROWS[:2]
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load_dataset))
    df, _ = import_dataset("arena", "hf:lmsys/chatbot_arena_conversations")
    assert calls == [("lmsys/chatbot_arena_conversations", "train")] and len(df) == 2


Q81 = "Compose an engaging travel blog post about a recent trip to Hawaii."
Q81_2 = "Rewrite your previous response. Start every sentence with the letter A."
MT_ROWS = {
    "human": [
        {"question_id": 81, "model_a": "alpaca-13b", "model_b": "gpt-3.5-turbo", "winner": "model_b",
         "judge": "author_2", "turn": 1,
         "conversation_a": _conv(Q81, "Alpaca blog", Q81_2, "A alpaca"),
         "conversation_b": _conv(Q81, "GPT blog", Q81_2, "A gpt")},
        # the same comparison listed the other way round by another annotator
        {"question_id": 81, "model_a": "gpt-3.5-turbo", "model_b": "alpaca-13b", "winner": "model_a",
         "judge": "expert_0", "turn": 1,
         "conversation_a": _conv(Q81, "GPT blog", Q81_2, "A gpt"),
         "conversation_b": _conv(Q81, "Alpaca blog", Q81_2, "A alpaca")},
        {"question_id": 81, "model_a": "alpaca-13b", "model_b": "gpt-3.5-turbo", "winner": "tie",
         "judge": "expert_1", "turn": 2,
         "conversation_a": _conv(Q81, "Alpaca blog", Q81_2, "A alpaca"),
         "conversation_b": _conv(Q81, "GPT blog", Q81_2, "A gpt")},
    ],
    "gpt4_pair": [
        {"question_id": 81, "model_a": "alpaca-13b", "model_b": "gpt-3.5-turbo", "winner": "model_b",
         "judge": "gpt4_pair", "turn": 1,
         "conversation_a": _conv(Q81, "Alpaca blog", Q81_2, "A alpaca"),
         "conversation_b": _conv(Q81, "GPT blog", Q81_2, "A gpt")},
        {"question_id": 81, "model_a": "gpt-3.5-turbo", "model_b": "claude-v1",
         "winner": "tie (inconsistent)",
         "judge": "gpt4_pair", "turn": 1,
         "conversation_a": _conv(Q81, "GPT blog", Q81_2, "A gpt"),
         "conversation_b": _conv(Q81, "Claude blog", Q81_2, "A claude")},
    ],
}


def test_mt_bench_human_collapses_votes(tmp_path):
    path = tmp_path / "mt.json"
    path.write_text(json.dumps(MT_ROWS))
    df, excl = import_dataset("mt-bench-human", path)
    assert excl.to_dict() == {"recoded:verdict_tie_inconsistent": 1}
    t1 = "mt-bench/81/alpaca-13b__gpt-3.5-turbo/turn1"
    r = _row(df, t1, "gpt-4")
    assert list(r.human) == ["b", "b"] and list(r.annotators) == ["author_2", "expert_0"]
    assert (r.verdict, r.response_a, r.generator_a) == ("b", "Alpaca blog", "alpaca-13b")
    t2 = _row(df, "mt-bench/81/alpaca-13b__gpt-3.5-turbo/turn2")  # no GPT-4 row: human-only
    assert list(t2.human) == ["tie"] and t2.response_b == f"GPT blog\n\nUser: {Q81_2}\n\nAssistant: A gpt"
    # sorted orientation: claude-v1 becomes A, and the inconsistent verdict a tie
    flipped = _row(df, "mt-bench/81/claude-v1__gpt-3.5-turbo/turn1", "gpt-4")
    assert (flipped.response_a, flipped.verdict, flipped.order_inconsistent) == ("Claude blog", "tie", True)
    assert list(flipped.human) == []
    only_human, _ = import_dataset("mt-bench-human", path, split=["human"])
    assert only_human["judge"].isna().all() and only_human["pair_id"].nunique() == 2


def test_mt_bench_human_bad_input(tmp_path):
    path = tmp_path / "mt.jsonl"
    row = {**MT_ROWS["human"][0], "winner": "model_c"}
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(TableError, match=r"(?s)mt.jsonl.*row 1, field 'winner': unknown label 'model_c'"):
        import_dataset("mt-bench-human", path)
    path.write_text(json.dumps({**MT_ROWS["human"][0], "turn": "two"}) + "\n")
    with pytest.raises(TableError, match=r"row 1, field 'turn': 'two' is not a turn number"):
        import_dataset("mt-bench-human", path)
    with pytest.raises(TableError, match=r"no split\(s\) \['train'\]"):
        (tmp_path / "mt.json").write_text(json.dumps(MT_ROWS))
        import_dataset("mt-bench-human", tmp_path / "mt.json", split=["train"])
