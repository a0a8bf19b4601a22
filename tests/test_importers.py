"""Importers on small real samples (tests/data/<dataset>/, rows listed in each SOURCE.md) and on
bad input. The expected counts below are the quirks that are really in those sample rows."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from judgebias.importers import IMPORTERS, import_dataset, split_counts
from judgebias.importers.pandalm import split_cmp_keys
from judgebias.tables.files import read_table
from judgebias.tables.pairwise import TableError, human_label, validate

DATA = Path(__file__).parent / "data"
PANDALM = DATA / "pandalm"
ALPACA = DATA / "alpaca_eval"
LLMBAR = DATA / "llmbar"
HH = DATA / "hh_rlhf" / "harmless-base-test.sample.jsonl.gz"


def _row(df: pd.DataFrame, pair_id: str, judge: str | None = None) -> pd.Series:
    sel = df[(df["pair_id"] == pair_id) & (df["judge"].isna() if judge is None else df["judge"] == judge)]
    assert len(sel) == 1, (pair_id, judge, len(sel))
    return sel.iloc[0]


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    return dst


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_registry_has_every_format():
    assert set(IMPORTERS) == {"pandalm", "alpaca-eval", "llmbar", "hh-rlhf", "arena", "mt-bench-human",
                              "mt-bench-single", "table"}


# --- PandaLM ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pandalm():
    return import_dataset("pandalm", PANDALM)


def test_pandalm_counts_every_real_quirk(pandalm):
    df, excl = pandalm
    # 30 sample records; 157/161 hold boolean responses, 18/301 empty ones -> 26 pairs x 2 judges.
    assert df["pair_id"].nunique() == 26 and len(df) == 52
    assert sorted(df["judge"].unique()) == ["gpt-3.5-turbo", "pandalm-7b"]
    dropped, no_verdict, recoded = split_counts(excl)
    assert dropped == {"pair_response1_boolean": 1, "pair_response2_boolean": 1,
                       "pair_response1_empty": 1, "pair_response2_empty": 1}
    # garbage verdicts keep their row (and pair) without a verdict: not counted as left out
    assert no_verdict == {"verdict_garbage": 2}
    assert df["verdict"].isna().sum() == 2
    # ties: gpt-3.5 writes "Tie" (idx 87, 90, 113), pandalm-7b and the annotators write 0.
    assert recoded == {"verdict_tie_spelled_Tie": 3, "verdict_tie_spelled_0": 3, "human_tie_spelled_0": 3}
    assert not {"pandalm/157", "pandalm/161", "pandalm/18", "pandalm/301"} & set(df["pair_id"])
    validate(df)  # the contract holds


def test_pandalm_verdict_spelled_otherwise_than_1_or_2_is_listed_as_recoded(tmp_path):
    import shutil

    folder = tmp_path / "pandalm"
    shutil.copytree(PANDALM, folder)
    path = folder / "gpt-3.5-turbo-testset-v1.json"
    records = json.loads(path.read_text())
    records[0]["gpt_result"], records[1]["gpt_result"] = "A", "b"
    path.write_text(json.dumps(records))
    df, excl = import_dataset("pandalm", folder)
    _, _, recoded = split_counts(excl)
    assert recoded["verdict_a_spelled_A"] == 1 and recoded["verdict_b_spelled_b"] == 1
    assert _row(df, "pandalm/0", "gpt-3.5-turbo").verdict == "a"


def test_pandalm_rows_match_source(pandalm):
    df, _ = pandalm
    r = _row(df, "pandalm/0", "gpt-3.5-turbo")
    assert (r.generator_a, r.generator_b) == ("bloom-7b", "llama-7b")  # cmp_key bloom-7b_llama-7b
    assert r.response_a.startswith("If you have any questions about my rate")
    assert r.prompt.startswith("The sentence you are given") and r.prompt.endswith("please let me know.")
    assert "\n\nIf you have any questions about my rate or" in r.prompt  # instruction, blank line, input
    assert r.verdict == "a" and list(r.human) == ["b", "b", "b"]  # gpt said "1", annotators 2, 2, 2
    assert _row(df, "pandalm/0", "pandalm-7b").verdict == "b"  # pandalm_result 2
    no_input = _row(df, "pandalm/4", "pandalm-7b")
    assert no_input.prompt == no_input.instruction.strip()


def test_pandalm_garbage_verdict_kept_without_verdict(pandalm):
    df, _ = pandalm
    r = _row(df, "pandalm/114", "gpt-3.5-turbo")
    assert r.verdict is None and "garbage" in r.judge_error and r.raw_verdict == "garbage"
    assert _row(df, "pandalm/114", "pandalm-7b").verdict is not None


def test_pandalm_ties_and_majority(pandalm):
    df, _ = pandalm
    assert _row(df, "pandalm/87", "gpt-3.5-turbo").verdict == "tie"  # gpt_result "Tie"
    assert (df.loc[df["judge"] == "pandalm-7b", "raw_verdict"] == "0").sum() == 3
    assert set(df.loc[df["raw_verdict"] == "0", "verdict"]) == {"tie"}
    # human: strict majority of three; 157 (1,1,0) would be "a" but is excluded; 2-of-3 gives a label
    labels = human_label(df.drop_duplicates("pair_id"))
    assert labels.notna().all()


def test_pandalm_no_majority_gives_no_label(tmp_path):
    folder = _copy(PANDALM, tmp_path)

    def three_ways(rows):
        rows[0].update(annotator1=0, annotator2=1, annotator3=2)
    _edit_json(folder / "testset-v1.json", three_ways)
    df, _ = import_dataset("pandalm", folder)
    pair = df[df["pair_id"] == "pandalm/0"]
    assert list(pair["human"].iloc[0]) == ["tie", "a", "b"]
    assert human_label(pair).isna().all()


def test_pandalm_verdicts_matched_by_idx_not_position(tmp_path, pandalm):
    folder = _copy(PANDALM, tmp_path)
    _edit_json(folder / "pandalm-7b-testset-v1.json", lambda rows: rows.reverse())
    df, _ = import_dataset("pandalm", folder)
    key = ["pair_id", "judge"]
    pd.testing.assert_series_equal(df.sort_values(key)["verdict"].reset_index(drop=True),
                                   pandalm[0].sort_values(key)["verdict"].reset_index(drop=True))


def test_pandalm_verdict_file_wrong_length(tmp_path):
    folder = _copy(PANDALM, tmp_path)
    _edit_json(folder / "gpt-3.5-turbo-testset-v1.json", lambda rows: rows.pop())
    message = r"(?s)gpt-3.5-turbo-testset-v1.json.*has 29 rows but testset-v1.json has 30"
    with pytest.raises(TableError, match=message):
        import_dataset("pandalm", folder)


def test_pandalm_verdict_idx_not_in_testset(tmp_path):
    folder = _copy(PANDALM, tmp_path)
    _edit_json(folder / "pandalm-7b-testset-v1.json", lambda rows: rows[4].update(idx=5000))
    message = r"(?s)pandalm-7b-testset-v1.json.*row 5, field 'idx': 5000 is not in"
    with pytest.raises(TableError, match=message):
        import_dataset("pandalm", folder)


def test_pandalm_missing_field_and_bad_json(tmp_path):
    folder = _copy(PANDALM, tmp_path)
    _edit_json(folder / "testset-v1.json", lambda rows: rows[2].pop("response2"))
    with pytest.raises(TableError, match=r"(?s)testset-v1.json.*row 3: missing field 'response2'"):
        import_dataset("pandalm", folder)
    (folder / "testset-v1.json").write_text('[{"idx": 0,')
    with pytest.raises(TableError, match=r"(?s)testset-v1.json.*not valid JSON.*line 1"):
        import_dataset("pandalm", folder)


def test_cmp_key_split_with_underscores_in_names():
    keys = {"llama-7b_opt-7b", "gpt_j-6b_opt-7b", "gpt_j-6b_my_model"}
    assert split_cmp_keys(keys) == {"llama-7b_opt-7b": ("llama-7b", "opt-7b"),
                                    "gpt_j-6b_opt-7b": ("gpt_j-6b", "opt-7b"),
                                    "gpt_j-6b_my_model": ("gpt_j-6b", "my_model")}
    with pytest.raises(TableError, match="cannot tell the two model names apart in 'a_b_c'"):
        split_cmp_keys({"a_b_c"})


# --- AlpacaEval ------------------------------------------------------------------------------------

def test_alpaca_eval_real_sample():
    df, excl = import_dataset("alpaca-eval", ALPACA)
    # 10 instructions x (claude weighted, claude cot, verbose, concise) + gpt4 vs itself (3);
    # identical outputs are scored 1.5 by AlpacaEval without a judge call: 2 per claude file,
    # 2 in concise, 1 in verbose (real), and all 3 of gpt4_1106_preview vs itself.
    assert excl.to_dict() == {"identical_outputs_not_judged": 13}
    assert len(df) == 30
    assert set(df["generator_b"]) == {"claude-2.1", "gpt-3.5-turbo-1106_verbose",
                                      "gpt-3.5-turbo-1106_concise"}
    assert set(df["generator_a"]) == {"gpt4_1106_preview"}
    assert (df["p_a"] - (2 - df["preference"])).abs().max() == 0
    # the same pair judged by two annotators shares its pair_id
    claude = df[df["generator_b"] == "claude-2.1"]
    assert claude.groupby("pair_id")["judge"].nunique().eq(2).all()
    weighted = claude["judge"] == "weighted_alpaca_eval_gpt4_turbo"
    r = claude[(claude["prompt"] == "what should i call you?") & weighted]
    assert r["p_a"].iloc[0] == pytest.approx(2 - 1.0003199981)  # preference in the file: output_1 wins
    validate(df)


def test_alpaca_eval_judge_generator_option():
    df, _ = import_dataset("alpaca-eval", ALPACA,
                           judge_generator={"weighted_alpaca_eval_gpt4_turbo": "gpt4_1106_preview"})
    weighted = df["judge"] == "weighted_alpaca_eval_gpt4_turbo"
    assert (df.loc[weighted, "judge_generator"] == "gpt4_1106_preview").all()
    assert df.loc[~weighted, "judge_generator"].isna().all()
    assert set(df["judge"]) == {"weighted_alpaca_eval_gpt4_turbo", "alpaca_eval_cot_gpt4_turbo_fn"}
    with pytest.raises(TableError, match="judge_generator names judge"):
        import_dataset("alpaca-eval", ALPACA, judge_generator={"gpt-4": "gpt4_1106_preview"})


def test_alpaca_eval_missing_and_bad_preference(tmp_path):
    folder = _copy(ALPACA, tmp_path)
    ann = folder / "claude-2.1" / "weighted_alpaca_eval_gpt4_turbo" / "annotations.json"
    _edit_json(ann, lambda rows: (rows[3].update(preference=None), rows[4].pop("raw_completion")))
    df, excl = import_dataset("alpaca-eval", folder)
    assert excl.to_dict() == {"identical_outputs_not_judged": 13, "preference_missing": 1}
    assert len(df) == 29
    _edit_json(ann, lambda rows: rows[5].update(preference=2.5))
    with pytest.raises(TableError, match=r"(?s)annotations.json.*row 6, field 'preference': 2.5 is outside"):
        import_dataset("alpaca-eval", folder)
    _edit_json(ann, lambda rows: rows[5].pop("output_2"))
    with pytest.raises(TableError, match=r"(?s)annotations.json.*row 6: missing field 'output_2'"):
        import_dataset("alpaca-eval", folder)


# --- LLMBar ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llmbar():
    return import_dataset("llmbar", LLMBAR)


def test_llmbar_both_orders_and_gold(llmbar):
    df, excl = llmbar
    assert excl.total == 0
    assert len(df) == 13 * 4 + 8  # Natural: 13 pairs x 4 judges; MT-Bench: 8 human-only pairs
    assert set(df["judge"].dropna()) == {"ChatGPT/Vanilla", "ChatGPT/Swap", "GPT-4/Vanilla", "GPT-4/Swap"}
    # Natural position 20 (sample row 1): ChatGPT/Vanilla says 1 with output_1 first, 2 when swapped
    r = _row(df, "llmbar/Natural/0", "ChatGPT/Vanilla")
    assert (r.verdict_ab, r.verdict_ba, r.verdict) == ("a", "b", "tie")
    assert list(r.human) == ["a"]  # label 1
    agree = df["verdict_ab"] == df["verdict_ba"]
    judged = df["judge"].notna()
    assert (df.loc[judged & agree, "verdict"] == df.loc[judged & agree, "verdict_ab"]).all()
    assert (df.loc[judged & ~agree, "verdict"] == "tie").all()
    mt = df[df["source"] == "llmbar/MT-Bench"]
    assert len(mt) == 8 and mt["judge"].isna().all() and mt["human"].map(len).eq(1).all()


def test_llmbar_swap_uses_last_round(llmbar):
    df, _ = llmbar
    # sample row 9 (Natural position 72): ChatGPT/Swap's first round disagrees (1 then 2),
    # the synthesis round agrees on 2.
    r = _row(df, "llmbar/Natural/8", "ChatGPT/Swap")
    assert r.judge_rounds == 2 and (r.verdict_ab, r.verdict_ba, r.verdict) == ("b", "b", "b")
    raw = json.loads((LLMBAR / "Natural/evaluators/ChatGPT/Swap/result.json").read_text())[8]["results"]
    assert (raw[0]["swap = False"]["winner"], raw[0]["swap = True"]["winner"]) == ("1", "2")


def test_llmbar_misaligned_results(tmp_path):
    folder = _copy(LLMBAR, tmp_path)
    res = folder / "Natural/evaluators/GPT-4/Vanilla/result.json"
    _edit_json(res, lambda rows: rows.insert(0, rows.pop()))
    with pytest.raises(TableError, match=r"(?s)GPT-4/Vanilla/result.json.*row 1, field 'input': differs"):
        import_dataset("llmbar", folder)
    _edit_json(res, lambda rows: rows.pop())
    with pytest.raises(TableError, match=r"(?s)result.json.*has 12 rows but .*dataset.json has 13"):
        import_dataset("llmbar", folder)


def test_llmbar_one_missing_order_keeps_the_row_without_a_verdict(tmp_path):
    folder = _copy(LLMBAR, tmp_path)
    res = folder / "Natural/evaluators/GPT-4/Vanilla/result.json"

    def drop(rows):
        rows[2]["results"][-1]["swap = True"]["winner"] = None

    _edit_json(res, drop)
    df, excl = import_dataset("llmbar", folder)
    dropped, no_verdict, _ = split_counts(excl)
    # the pair and the judge row stay (the other order is still read), only the verdict is gone
    assert no_verdict == {"verdict_missing_in_one_order": 1} and not dropped
    r = _row(df, "llmbar/Natural/2", "GPT-4/Vanilla")
    assert r.verdict_ba is None and r.verdict is None and r.verdict_ab in ("a", "b", "tie")
    assert len(df) == len(import_dataset("llmbar", LLMBAR)[0])


# --- HH-RLHF ---------------------------------------------------------------------------------------

def test_hh_rlhf_split_and_counts():
    df, excl = import_dataset("hh-rlhf", HH)
    assert excl.to_dict() == {"empty_final_turn": 1, "dialogues_diverge_before_last_turn": 1}
    assert len(df) == 22 and df["judge"].isna().all()
    assert set(df["human"].map(tuple)) == {("a",), ("b",)}  # randomized, not always A
    assert (df["order_seed"] == 0).all()
    with gzip.open(HH, "rt") as fh:
        first = json.loads(fh.readline())
    r = _row(df, f"hh-rlhf/{HH.name}/1")
    chosen = r.response_a if list(r.human) == ["a"] else r.response_b
    assert first["chosen"].endswith(chosen) and first["chosen"].startswith("\n\n" + r.prompt)
    assert not r.prompt.endswith("Assistant:") and r.prompt.startswith("Human:")


def test_hh_rlhf_seed_is_deterministic():
    a, _ = import_dataset("hh-rlhf", HH, seed=0)
    b, _ = import_dataset("hh-rlhf", HH, seed=0)
    c, _ = import_dataset("hh-rlhf", HH, seed=1)
    pd.testing.assert_frame_equal(a, b)
    assert not a["human"].map(tuple).equals(c["human"].map(tuple))
    assert (c["order_seed"] == 1).all()


def test_hh_rlhf_bad_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    good = {"chosen": "\n\nHuman: hi\n\nAssistant: a", "rejected": "\n\nHuman: hi\n\nAssistant: b"}
    bad.write_text(json.dumps(good) + '\n{"chosen": "x"\n')
    with pytest.raises(TableError, match=r"(?s)bad.jsonl.*row 2: not valid JSON"):
        import_dataset("hh-rlhf", bad)
    bad.write_text('{"chosen": "\\n\\nHuman: hi\\n\\nAssistant: a"}\n')
    with pytest.raises(TableError, match=r"row 1: missing field 'rejected'"):
        import_dataset("hh-rlhf", bad)


# --- registry and CLI ------------------------------------------------------------------------------

def test_unknown_format():
    with pytest.raises(TableError, match="unknown format 'csv-thing'; known: alpaca-eval"):
        import_dataset("csv-thing", PANDALM)


@pytest.fixture()
def cli():
    from judgebias.cli import importers

    app = typer.Typer()

    @app.callback()
    def _group() -> None:  # keep 'import' a sub-command even when it is the only one
        pass
    importers.register(app)
    return app


def test_cli_import_writes_table_and_prints_counts(cli, tmp_path):
    out = tmp_path / "pandalm.parquet"
    res = CliRunner().invoke(cli, ["import", "pandalm", str(PANDALM), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "rows: 52  pairs: 26  judges: 2 (gpt-3.5-turbo, pandalm-7b)" in res.output
    assert "pairs with human labels: 26" in res.output
    assert "verdict_garbage: 2" in res.output and "verdict_tie_spelled_Tie: 3" in res.output
    # 4 pairs left out; the 2 garbage verdicts are rows kept without a verdict, not exclusions
    assert "excluded: 4\n" in res.output and "kept without a verdict" in res.output
    table, _ = read_table(out)
    assert len(table) == 52 and list(_row(table, "pandalm/0", "pandalm-7b").human) == ["b", "b", "b"]


def test_cli_import_options_and_errors(cli, tmp_path):
    out = tmp_path / "hh.jsonl"
    res = CliRunner().invoke(cli, ["import", "hh-rlhf", str(HH), "--out", str(out), "--seed", "3"])
    assert res.exit_code == 0, res.output
    assert read_table(out)[0]["order_seed"].eq(3).all()
    res = CliRunner().invoke(cli, ["import", "alpaca-eval", str(ALPACA), "--out", str(tmp_path / "a.jsonl"),
                                   "--judge-generator", "weighted_alpaca_eval_gpt4_turbo=gpt4_1106_preview"])
    assert res.exit_code == 0, res.output
    assert "identical_outputs_not_judged: 13" in res.output
    res = CliRunner().invoke(cli, ["import", "nope", str(PANDALM), "--out", str(tmp_path / "x.jsonl")])
    assert res.exit_code == 2 and "unknown format 'nope'" in res.output
    res = CliRunner().invoke(cli, ["import", "pandalm", str(tmp_path / "missing"), "--out",
                                   str(tmp_path / "x.jsonl")])
    assert res.exit_code == 2 and "testset-v1.json" in res.output and "file does not exist" in res.output


def test_an_empty_file_says_it_is_empty(tmp_path):
    # Fault injection found "every record was excluded: no exclusions" for an empty hh-rlhf file.
    import gzip

    empty = tmp_path / "empty.jsonl.gz"
    with gzip.open(empty, "wt"):
        pass
    with pytest.raises(TableError, match="the file holds no records: it is empty"):
        import_dataset("hh-rlhf", empty)
