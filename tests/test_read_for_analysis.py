"""``read_for_analysis``: the validated table of ``read_table`` read column-wise (texts as categoricals
over their distinct values, human labels as an Arrow list column), and the same problems found."""

from __future__ import annotations

import pandas as pd
import pytest
from test_analyze import synthetic

from judgebias.metrics import frame as F
from judgebias.metrics.frame import response_features
from judgebias.reporting.analysis import analyze
from judgebias.tables.files import read_table, write_table
from judgebias.tables.for_analysis import read_for_analysis
from judgebias.tables.pairwise import TableError


def _plain_values(table: pd.DataFrame) -> pd.DataFrame:
    """Every column as Python values (lists for ``human``), whatever its storage."""
    out = table.astype(object).copy()
    out["human"] = [list(v) for v in table["human"]]
    return out


def test_same_table_and_figures_as_read_table(tmp_path):
    table = synthetic(80)
    table.loc[2, "human"] = None  # a missing list reads as an empty one on both paths
    path = write_table(table, tmp_path / "t.parquet")
    plain, ex_plain = read_table(path)
    shared, ex_shared = read_for_analysis(path)
    texts = ["prompt", "response_a", "response_b"]
    special = [*texts, "human"]
    # Names stay categoricals (a code per row, the name once): the same values as read_table's.
    # So do the pair ids (hashed once by the read, not again by validation and the figures).
    names = {c: object for c in ("generator_a", "generator_b", "judge")}
    assert all(isinstance(shared[c].dtype, pd.CategoricalDtype) for c in [*names, "pair_id"])
    assert shared["pair_id"].astype(object).tolist() == plain["pair_id"].tolist()
    special.append("pair_id")
    pd.testing.assert_frame_equal(shared.drop(columns=special).astype(names), plain.drop(columns=special))
    assert _plain_values(shared).equals(_plain_values(plain))
    assert shared["human"].iat[2] == [] and plain["human"].iat[2] == []
    # Each distinct text is stored once: one category per pair's text, a code per row.
    col = shared["response_a"]
    assert isinstance(col.dtype, pd.CategoricalDtype)
    assert len(col.cat.categories) == plain["response_a"].nunique()
    assert isinstance(shared["human"].dtype, pd.ArrowDtype)
    assert analyze(shared, exclusions=ex_shared, reps=100) == analyze(plain, exclusions=ex_plain, reps=100)


def test_non_canonical_labels_take_the_per_row_path(tmp_path):
    table = synthetic(20)
    table["human"] = table["human"].astype(object)
    table.at[1, "human"] = ["Model_A", " b "]  # spellings that normalize: same table as read_table's
    path = write_table(table, tmp_path / "t.parquet")
    plain, _ = read_table(path)
    shared, _ = read_for_analysis(path)
    assert shared["human"].iat[1] == ["a", "b"]
    assert _plain_values(shared).equals(_plain_values(plain))


def test_problems_are_the_same(tmp_path):
    table = synthetic(20)
    table.loc[3, "response_a"] = None                                  # empty text
    other = table.index[(table["pair_id"] == table.loc[5, "pair_id"])][-1]
    table.loc[other, "prompt"] = "another prompt"                      # a pair with two prompts
    path = write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(TableError) as plain:
        read_table(path)
    with pytest.raises(TableError) as shared:
        read_for_analysis(path)
    assert shared.value.problems == plain.value.problems
    assert any("field 'response_a': is empty" in p for p in plain.value.problems)
    assert any("has another prompt" in p for p in plain.value.problems)


def test_other_formats_read_as_before(tmp_path):
    path = write_table(synthetic(10), tmp_path / "t.jsonl")
    a, _ = read_for_analysis(path)
    b, _ = read_table(path)
    pd.testing.assert_frame_equal(a, b)


def _styled(n_pairs: int) -> pd.DataFrame:
    """``synthetic`` with markdown, code fences and non-ASCII text in the responses (counted once per
    text in both reads)."""
    table = synthetic(n_pairs)
    extra = {0: "# Title\n- item **bold** é", 1: "```\n# not a header\n```\n1. one\n2. two", 2: "__x__ ü ü"}
    for pair, text in extra.items():
        rows = table["pair_id"] == f"p{pair}"
        table.loc[rows, "response_a"] = text + table.loc[rows, "response_a"]
    return table


def test_without_response_texts_same_figures(tmp_path):
    path = write_table(_styled(60), tmp_path / "t.parquet")
    full, ex_full = read_for_analysis(path)
    lean, ex_lean = read_for_analysis(path, response_features=response_features)
    assert "response_a" not in lean.columns and "response_b" not in lean.columns
    assert "prompt" in lean.columns  # the full length-controlled form groups pairs by it
    # Counted once per text as it was read: what ``prepare`` derives from the texts.
    prepared = F.prepare(full)
    for col in (F.WORDS_A, F.WORDS_B, *F.MD_A, *F.MD_B):
        assert lean[col].tolist() == prepared[col].tolist(), col
    assert lean[F.CHARS_A].tolist() == full["response_a"].str.len().tolist()
    assert lean[F.MD_A[0]].iat[0] == 1  # the header "# Title" of p0
    for baseline in (None, "other"):  # "other": the length-controlled win rates read the characters
        a = analyze(full, exclusions=ex_full, reps=100, baseline=baseline)
        b = analyze(lean, exclusions=ex_lean, reps=100, baseline=baseline)
        assert a == b
    assert a["length_controlled"]["rates"]


def test_without_response_texts_same_problems(tmp_path):
    table = synthetic(20)
    table.loc[3, "response_a"] = None                                   # missing
    table.loc[4, "response_b"] = "  "                                   # blank
    other = table.index[(table["pair_id"] == table.loc[5, "pair_id"])][-1]
    table.loc[other, "response_a"] = "another answer"                   # a pair with two texts
    second = table.index[(table["pair_id"] == table.loc[4, "pair_id"])][-1]
    table.loc[second, "response_b"] = " "                               # another blank text, same pair
    path = write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(TableError) as full:
        read_for_analysis(path)
    with pytest.raises(TableError) as lean:
        read_for_analysis(path, response_features=response_features)
    assert lean.value.problems == full.value.problems
    assert any("has another response_b" in p for p in full.value.problems)
    a, ex_a = read_for_analysis(path, skip_invalid=True)
    b, ex_b = read_for_analysis(path, skip_invalid=True, response_features=response_features)
    assert ex_a.to_dict() == ex_b.to_dict() and len(a) == len(b) < len(table)
    assert analyze(a, exclusions=ex_a, reps=100) == analyze(b, exclusions=ex_b, reps=100)


def test_a_response_stored_otherwise_keeps_both_texts(tmp_path):
    # A dictionary-typed response_a (a pandas categorical written as is) is not read as plain text:
    # both responses are then kept, and the figures derive their counts from the texts.
    table = synthetic(20)
    path = tmp_path / "t.parquet"
    table.assign(response_a=table["response_a"].astype("category")).to_parquet(path, index=False)
    lean, ex = read_for_analysis(path, response_features=response_features)
    assert {"response_a", "response_b"} <= set(lean.columns)
    full, ex_full = read_for_analysis(path)
    assert analyze(lean, exclusions=ex, reps=100) == analyze(full, exclusions=ex_full, reps=100)


@pytest.mark.parametrize("column", [F.WORDS_A, F.CHARS_B, F.PAIR, "_jb_mine"])
def test_a_column_named_like_a_derived_one_is_refused_on_every_path(tmp_path, column):
    # A user's ``_jb_words_a`` would be taken by ``prepare`` as the word count (or, read lean, meet the
    # count of the same name): every reader refuses it by name, --skip-invalid or not.
    table = synthetic(60).assign(**{column: 7})
    paths = [write_table(table, tmp_path / "t.parquet"), write_table(table, tmp_path / "t.jsonl")]
    reads = [lambda p: read_for_analysis(p, response_features=response_features),
             lambda p: read_for_analysis(p, skip_invalid=True), read_table]
    for path in paths:
        for read in reads:
            with pytest.raises(TableError) as err:
                read(path)
            assert f"column {column!r}" in str(err.value) and "'_jb_' are reserved" in str(err.value)
    lean, _ = read_for_analysis(write_table(synthetic(60), tmp_path / "u.parquet"),
                                response_features=response_features)
    assert F.WORDS_A in lean.columns and "response_a" not in lean.columns  # our own counts still read


def test_analyze_names_the_reserved_column(tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app

    path = write_table(synthetic(60).assign(_jb_words_a=3), tmp_path / "t.parquet")
    res = CliRunner().invoke(app, ["analyze", str(path), "--out", str(tmp_path / "m.json"), "--no-mlflow",
                                   "--no-report", "--skip-invalid"])
    assert res.exit_code == 2, res.output
    assert "'_jb_words_a'" in res.output and "reserved" in res.output


def test_response_texts_read_back_for_the_rows_kept(tmp_path):
    from judgebias.tables.for_analysis import with_response_texts

    table = synthetic(80)
    # Numeric ids (read back as validation reads them: as text); pair 3's first row is dropped by
    # --skip-invalid, its other judges' rows kept.
    table["pair_id"] = table["pair_id"].str[1:].astype(int)
    table.loc[3, "p_a"] = 2.0
    path = tmp_path / "t.parquet"
    table.to_parquet(path, row_group_size=7)  # the kept rows spread over row groups
    lean, _ = read_for_analysis(path, skip_invalid=True, response_features=response_features)
    plain, _ = read_table(path, skip_invalid=True)
    assert len(lean) == len(table) - 1 and 3 in set(lean["pair_id"].astype(int))
    back = with_response_texts(lean.iloc[::9].reset_index(drop=True), path)
    want = plain.iloc[::9].reset_index(drop=True)
    assert "3" in set(back["pair_id"].astype(str))  # a pair whose first row in the file was dropped
    assert back["response_a"].tolist() == want["response_a"].tolist()
    assert back["response_b"].tolist() == want["response_b"].tolist()
    assert list(back.columns) == list(want.columns)  # the counts gone, the texts where they were


def test_memory_is_handed_back_only_from_the_threshold_up(tmp_path, monkeypatch):
    # A full gc.collect() (hand_back_memory) costs up to a second in a process holding torch and
    # pandas, and a small table frees next to nothing: before and after validation from
    # HAND_BACK_ROWS rows, never below. The threshold is moved to this table's size to try both sides.
    import judgebias.tables.for_analysis as fa

    assert fa.HAND_BACK_ROWS == 100_000
    calls: list[int] = []
    monkeypatch.setattr(fa, "hand_back_memory", lambda: calls.append(1))
    table = synthetic(10)
    path = write_table(table, tmp_path / "t.parquet")
    rows = len(table)
    reads = {}
    for threshold in (fa.HAND_BACK_ROWS, rows + 1, rows, 1):
        monkeypatch.setattr(fa, "HAND_BACK_ROWS", threshold)
        calls.clear()
        got, _ = read_for_analysis(path)
        assert len(got) == rows
        reads[threshold] = len(calls)
    assert reads == {100_000: 0, rows + 1: 0, rows: 2, 1: 2}
