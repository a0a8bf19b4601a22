"""The column-wise readers and checks behind ``read_for_analysis``: each gives what the per-row rule
gives, on small tables whose answer is worked out by hand in the comments."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from judgebias.metrics import frame as F
from judgebias.tables.columns import arrow_label_lists, first_labels_by_value, missing_mask
from judgebias.tables.for_analysis import dictionary_categorical
from judgebias.tables.parquet_columns import distinct_categorical, text_categorical


def _write(tmp_path, texts, row_group_size):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": pa.array(texts, pa.string())}), path, row_group_size=row_group_size)
    return pq.ParquetFile(path, read_dictionary=["text"])


def _same_partition(codes, values):
    """Equal codes exactly where the values are equal (None: code -1)."""
    for i, a in enumerate(values):
        assert (codes[i] == -1) == (a is None)
        for j, b in enumerate(values):
            if a is not None and b is not None:
                assert (codes[i] == codes[j]) == (a == b), (i, j)


@pytest.mark.parametrize("row_group_size", [1, 2, 3, 7])
def test_text_categorical_codes_equal_exactly_where_texts_are(tmp_path, row_group_size):
    # Pairs 0, 1, 2 (group codes); pair 1's third row has another text ("y!" vs "y"), pair 2 starts
    # with a missing text and its second row gives "x", the same text as pair 0 (a shared prompt).
    texts = ["x", "y", "x", "y", None, "y!", "x", "x"]
    group = np.array([0, 1, 0, 1, 2, 1, 2, 0])
    cat = text_categorical(_write(tmp_path, texts, row_group_size), "text", group)
    codes = np.asarray(cat.codes)
    _same_partition(codes, texts)
    # Three distinct texts: x, y, y!; every category appears once.
    assert sorted(cat.categories.astype(object)) == ["x", "y", "y!"]
    assert [None if c < 0 else cat.categories[c] for c in codes] == texts


def test_text_categorical_any_grouping_gives_the_same_partition(tmp_path):
    # The grouping only decides which texts are compared; a grouping that puts different texts in
    # one group (all rows in group 0) still separates them.
    texts = ["b", "a", "b", None, "c", "a"]
    cat = text_categorical(_write(tmp_path, texts, 2), "text", np.zeros(6, dtype=np.int64))
    _same_partition(np.asarray(cat.codes), texts)
    assert len(cat.categories) == 3


def test_text_categorical_checks_the_group_codes(tmp_path):
    with pytest.raises(ValueError, match="3 group codes for 4 rows"):
        text_categorical(_write(tmp_path, ["a", "b", "c", "d"], 2), "text", np.zeros(3, dtype=np.int64))


def test_dictionary_categorical_reencodes_a_dictionary_with_repeats():
    # A dictionary ["a", "b", "a"] (the value "a" twice) with indices [0, 1, 2, None]: rows 0 and 2
    # hold the same text and must share a code; row 3 is missing.
    arr = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, None], pa.int32()), pa.array(["a", "b", "a"]))
    cat = dictionary_categorical(pa.chunked_array([arr]))
    codes = np.asarray(cat.codes)
    assert codes[0] == codes[2] != codes[1] and codes[3] == -1
    assert list(cat.categories.astype(object)) == ["a", "b"]


def test_distinct_categorical_is_the_checked_construction_without_the_check():
    # Codes [1, -1, 0, 1] over ["x", "y"]: y, missing, x, y -- equal to pandas' checked construction.
    cats = pa.array(["x", "y"], pa.large_string())
    fast = distinct_categorical(np.array([1, -1, 0, 1], dtype=np.int32), cats)
    checked = pd.Categorical.from_codes([1, -1, 0, 1], dtype=pd.CategoricalDtype(
        pd.Index(pd.arrays.ArrowExtensionArray(cats))))
    assert fast.dtype == checked.dtype
    values = pd.Series(fast).astype(object)
    assert values.isna().tolist() == [False, True, False, False]
    assert values[[0, 2, 3]].tolist() == ["y", "x", "y"]
    pd.testing.assert_series_equal(pd.Series(fast), pd.Series(checked))


def test_missing_mask_of_a_text_categorical_is_per_category():
    # Categories "", "  ", "ok": the first two are blank; a missing row (code -1) is missing too.
    values = pd.Series(pd.Categorical.from_codes([2, 0, 1, -1, 2], categories=["", "  ", "ok"]))
    assert missing_mask(values).tolist() == [False, True, True, True, False]


def test_first_labels_by_value_matches_the_per_row_rule():
    # "Model_A" -> a; "a|b" -> two labels, first "a", flagged as more than one; "maybe" -> error,
    # no label; None -> no label.
    values = pd.Series(["Model_A", "a|b", "maybe", None, "Model_A"], dtype=object)
    first, multi, errors = first_labels_by_value(values)
    assert first.tolist() == ["a", "a", None, None, "a"]
    assert multi.tolist() == [False, True, False, False, False]
    assert list(errors) == [2] and "unknown label 'maybe'" in errors[2]
    # The same from a categorical (read_for_analysis's names): read off its codes.
    cat = first_labels_by_value(values.astype("category"))
    assert cat[0].tolist() == first.tolist() and cat[1].tolist() == multi.tolist() and list(cat[2]) == [2]


def test_arrow_label_lists_keeps_canonical_lists_and_empties_missing_ones():
    arr = pa.array([["a", "b"], None, [], ["tie"]], pa.list_(pa.string()))
    kept = arrow_label_lists(pd.Series(pd.arrays.ArrowExtensionArray(arr)))
    assert [list(v) for v in kept] == [["a", "b"], [], [], ["tie"]]
    # A spelling to normalize ("A") or a missing label inside a list: the per-row path decides.
    for other in ([["A"]], [["a", None]]):
        series = pd.Series(pd.arrays.ArrowExtensionArray(pa.array(other, pa.list_(pa.string()))))
        assert arrow_label_lists(series) is None
    assert arrow_label_lists(pd.Series([["a"]], dtype=object)) is None


def test_human_features_from_arrow_lists_equal_the_per_row_ones():
    # Rows: [a, a, b] -> majority a (code 0), vote 2/3, 3 labels, 0 ties; [tie, b] -> no majority
    # (-2), vote (0 + 0.5) / 2 = 0.25, 2 labels, 1 tie; [] -> missing (-1), NaN, 0, 0.
    lists = [["a", "a", "b"], ["tie", "b"], []]
    arrow = F.human_features(pd.Series(pd.arrays.ArrowExtensionArray(pa.array(lists, pa.list_(pa.string())))))
    plain = F.human_features(pd.Series(lists, dtype=object))
    assert arrow[0].tolist() == plain[0].tolist() == [0, -2, -1]
    np.testing.assert_array_equal(arrow[1], plain[1])
    assert arrow[1][0] == pytest.approx(2 / 3) and arrow[1][1] == 0.25 and np.isnan(arrow[1][2])
    assert arrow[2].tolist() == [3, 2, 0] and arrow[3].tolist() == [0, 1, 0]


def test_markdown_and_word_counts_of_a_categorical_are_per_text():
    # "# T\n- x\n**b**": 1 header, 1 list item, 1 bold span, 4 words ("#", "T", "-", "x\n**b**" is
    # split at the newline: "x", "**b**" -> 5 words); "plain words" none of them, 2 words.
    texts = pd.Series(["# T\n- x\n**b**", "plain words", None, "plain words"], dtype=object)
    as_cat = texts.astype("category")
    for name in ("headers", "lists", "bold"):
        assert F.markdown_counts(as_cat)[name].tolist() == F.markdown_counts(texts)[name].tolist()
    assert F.markdown_counts(texts)["headers"].tolist() == [1, 0, 0, 0]
    assert F.word_counts(as_cat).tolist() == F.word_counts(texts).tolist() == [5, 2, 0, 2]
    assert F.word_counts(as_cat, np.array([3, 0])).tolist() == [2, 5]


def test_repeated_pairs_are_the_later_rows_of_equal_code_pairs_missing_included():
    from judgebias.tables.pairwise import _repeated

    # (pair, judge) codes: (0, 0), (0, 1), (0, 0) repeats row 0; (-1, 1), (-1, 1) repeats row 3
    # (missing is a value like any other); (1, -1) is new.
    first = np.array([0, 0, 0, -1, -1, 1])
    second = np.array([0, 1, 0, 1, 1, -1])
    assert _repeated(first, second).tolist() == [False, False, True, False, True, False]
