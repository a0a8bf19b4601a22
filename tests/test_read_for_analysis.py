"""``read_for_analysis``: the validated table of ``read_table`` with each distinct Parquet text stored
once (shared by the rows of its pair), and the same problems found."""

from __future__ import annotations

import pandas as pd
import pytest
from test_analyze import synthetic

from judgebias.io import read_for_analysis, read_table, write_table
from judgebias.reporting.analysis import analyze
from judgebias.table import TableError


def test_same_table_and_figures_as_read_table(tmp_path):
    path = write_table(synthetic(80), tmp_path / "t.parquet")
    plain, ex_plain = read_table(path)
    shared, ex_shared = read_for_analysis(path)
    texts = ["prompt", "response_a", "response_b"]
    pd.testing.assert_frame_equal(shared.drop(columns=texts), plain.drop(columns=texts))
    assert shared[texts].astype(object).equals(plain[texts].astype(object))
    # The rows of one pair (one per judge) hold one string object, not a copy each.
    col = shared["response_a"]
    rows = shared.index[shared["pair_id"] == shared["pair_id"].iat[0]]
    assert len(rows) > 1 and all(col.iat[r] is col.iat[rows[0]] for r in rows)
    assert analyze(shared, exclusions=ex_shared, reps=100) == analyze(plain, exclusions=ex_plain, reps=100)


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
