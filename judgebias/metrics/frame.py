"""Vectorized per-row features shared by the metrics, computed once per table.

``prepare(df)`` returns a copy of a validated judgment table with integer-coded columns added
(names start with ``_jb_``): pair codes, human majority, judge choice, vote shares, word counts.
Every metric calls it; when the columns are already there (``analyze`` prepares once) it is free.
Codes: 0 = "a", 1 = "b", 2 = "tie", -1 = missing; human majority -2 = labels without a strict
majority.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from itertools import chain

import numpy as np
import pandas as pd

from judgebias.metrics.text_features import markdown_counts, word_counts
from judgebias.stats import Clusters
from judgebias.tables.folding import verdict_codes

A, B, TIE, MISSING, NO_MAJORITY = 0, 1, 2, -1, -2

PAIR = "_jb_pair"
HUMAN = "_jb_human"          # strict majority of the human labels (code)
HUMAN_VOTE = "_jb_hvote"     # share of human votes for A, a tie vote counting 1/2 (NaN: no labels)
HUMAN_N = "_jb_hn"           # number of human labels
HUMAN_TIES = "_jb_hties"     # how many of them are "tie" (with the vote share: the label counts)
CHOICE = "_jb_choice"        # judge's hard choice (code): from p_a when present, else verdict
VOTE = "_jb_vote"            # judge's vote for A in [0, 1]: p_a, else verdict as 1 / 0 / 0.5
WORDS_A = "_jb_words_a"
WORDS_B = "_jb_words_b"
# Markdown elements per response (Arena-Hard-Auto's style features): headers, list items, bold spans.
MARKDOWN = ("headers", "lists", "bold")
MD_A = tuple(f"_jb_{m}_a" for m in MARKDOWN)
MD_B = tuple(f"_jb_{m}_b" for m in MARKDOWN)
# The cluster of the row's pair (the unit rows share: by default its prompt), as integer codes; the
# column that defined it is in ``df.attrs[CLUSTER_BY]`` ("none": every pair its own cluster).
CLUSTER = "_jb_cluster"
CLUSTER_BY = "jb_cluster_by"
DEFAULT_CLUSTER_BY = "prompt"
DERIVED = (PAIR, CLUSTER, HUMAN, HUMAN_VOTE, HUMAN_N, HUMAN_TIES, CHOICE, VOTE, WORDS_A, WORDS_B,
           *MD_A, *MD_B)
# Characters per response: only in a table read without its response texts (``response_features``),
# where the length-controlled win rates read them instead of the texts.
CHARS_A, CHARS_B = "_jb_chars_a", "_jb_chars_b"

# A prepared table may have dropped a raw column once its feature is computed.
_ALIAS = {"human": HUMAN, "response_a": WORDS_A, "response_b": WORDS_B, "verdict": CHOICE}


def require(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns and _ALIAS.get(c) not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {', '.join(missing)}")


def rows_of(df: pd.DataFrame, what: str, judge: str, column: str, value: str, id_column: str) -> pd.DataFrame:
    """A probe table's rows of ``judge`` with ``column == value``, one per ``id_column``; ValueError
    naming the judge and value when there are none, or the first id that repeats."""
    rows = df[(df["judge"] == judge) & (df[column] == value)]
    if rows.empty:
        raise ValueError(f"{what}: no rows for judge {judge!r} and {column} {value!r}")
    dup = rows[id_column].duplicated()
    if dup.any():
        first = rows.loc[dup, id_column].iloc[0]
        raise ValueError(f"{what}: {id_column.removesuffix('_id')} {first!r} appears twice for {judge!r}, "
                         f"{value!r}")
    return rows


_CODE_OF = {"a": A, "b": B, "tie": TIE}


def label_codes(values: pd.Series, column: str) -> np.ndarray:
    """'a'/'b'/'tie'/None -> 0/1/2/-1 (``tables.folding.verdict_codes`` with this module's missing code).
    Anything else is an error: tables are validated first."""
    return verdict_codes(values, column, missing=MISSING)


def choice_codes(p: np.ndarray, verdict_codes: np.ndarray) -> np.ndarray:
    """Hard choice: the verdict (folded from both orders by the table's fold rule), else from a
    probability of A (> 0.5 A, < 0.5 B, = 0.5 tie). Under the default rule a judge with
    probabilities has the verdict of its mean P(A), so the two agree; under ``agree-else-tie`` an
    order-dependent choice is a tie even when the mean P(A) leans one way."""
    from_p = np.where(p > 0.5, A, np.where(p < 0.5, B, np.where(np.isnan(p), MISSING, TIE))).astype(np.int8)
    return np.where(verdict_codes == MISSING, from_p, verdict_codes).astype(np.int8)


def vote_for_a(p: np.ndarray, verdict_codes: np.ndarray) -> np.ndarray:
    """The judge's vote for A in [0, 1]: its probability when it has one, else 1 / 0 / 0.5 from the
    verdict (the DBG paper's treatment of judges without probabilities); NaN when neither."""
    from_verdict = np.select([verdict_codes == A, verdict_codes == B, verdict_codes == TIE],
                             [1.0, 0.0, 0.5], np.nan)
    return np.where(np.isnan(p), from_verdict, p)


def human_features(human: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(majority code, vote share for A, number of labels, number of tie labels) per row of a
    list-valued column."""
    if isinstance(human.dtype, pd.ArrowDtype):
        arrow = _arrow_label_codes(human)
        if arrow is not None:
            return _label_features(*arrow)
    values = human.to_numpy(dtype=object)
    n = values.size
    for v in values[:1000]:  # cheap guard on the contract; validate() guarantees lists
        if not isinstance(v, (list, tuple, np.ndarray)):
            raise ValueError(f"column 'human': expected a list of labels per row, got {v!r} "
                             "(validate the table with judgebias.tables.pairwise.validate first)")
    lens = np.fromiter(map(len, values), dtype=np.int64, count=n)
    total = int(lens.sum())
    try:  # C-level iteration: a dict lookup per label, no Python frame per row
        codes = np.fromiter(map(_CODE_OF.__getitem__, chain.from_iterable(values)), dtype=np.int64,
                            count=total)
    except (KeyError, TypeError):
        bad = next(x for x in chain.from_iterable(values) if not isinstance(x, str) or x not in _CODE_OF)
        raise ValueError(f"column 'human': label {bad!r} is not 'a', 'b' or 'tie' "
                         "(validate the table first)") from None
    return _label_features(codes, lens)


def _label_features(codes: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, ...]:
    """``human_features`` from the flattened label codes (0/1/2, rows in order) and each row's count."""
    n = lens.size
    # Each row's count of a label: a running count of that label read at the rows' list bounds (no
    # row number and key per label: three table-sized int64 arrays of three labels per row).
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=bounds[1:])
    counts = np.empty((n, 3), dtype=np.int64)
    running = np.zeros(codes.size + 1, dtype=np.int64)
    for label in (A, B, TIE):
        np.cumsum(codes == label, out=running[1:])
        counts[:, label] = running[bounds[1:]] - running[bounds[:-1]]
    del running
    top = counts.argmax(axis=1).astype(np.int8)
    has_majority = counts.max(axis=1) * 2 > lens
    majority = np.where(lens == 0, MISSING, np.where(has_majority, top, NO_MAJORITY)).astype(np.int8)
    with np.errstate(invalid="ignore", divide="ignore"):
        vote = (counts[:, A] + 0.5 * counts[:, TIE]) / lens
    return majority, np.where(lens == 0, np.nan, vote), lens, counts[:, TIE]


def _arrow_list_lengths(human: pd.Series) -> np.ndarray | None:
    """Labels per row of an Arrow list column (0 where missing); None for any other column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(human.dtype, pd.ArrowDtype):
        return None
    arrow_type = human.dtype.pyarrow_dtype
    if not (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
        return None
    arr = pa.array(human.array)
    return pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def _arrow_label_codes(human: pd.Series) -> tuple[np.ndarray, np.ndarray] | None:
    """(flattened label codes, labels per row) of an Arrow list-of-text column, by Arrow kernels;
    None when it holds anything but "a" / "b" / "tie" (the per-row path then names the bad label)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arrow_type = human.dtype.pyarrow_dtype
    if not (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
        return None
    arr = pa.array(human.array)
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    flat = pc.list_flatten(arr)
    codes = pc.index_in(flat, pa.array(["a", "b", "tie"]))  # A, B, TIE in that order
    if codes.null_count:
        return None
    lens = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes.to_numpy(zero_copy_only=False).astype(np.int8), lens


def response_features(column: str, texts) -> dict[str, np.ndarray]:
    """What the figures read of the texts of ``column`` (response_a / response_b), per text of an
    Arrow text array: the word and markdown counts ``prepare`` would derive and the characters
    (``CHARS_A`` / ``CHARS_B``), under their column names.
    ``judgebias.tables.for_analysis.read_for_analysis`` takes it to read a table without holding its
    response texts."""
    import pyarrow.compute as pc

    side = {"response_a": "a", "response_b": "b"}[column]
    series = pd.Series(pd.arrays.ArrowExtensionArray(texts))
    counts = markdown_counts(series)
    return {f"_jb_words_{side}": word_counts(series),
            **{f"_jb_{m}_{side}": counts[m] for m in MARKDOWN},
            f"_jb_chars_{side}": pc.fill_null(pc.utf8_length(texts), 0).to_numpy(zero_copy_only=False)}


def char_lengths(rows: pd.DataFrame, column: str) -> np.ndarray:
    """Characters per row of response column ``column`` (``str.len``), from the texts or, in a table
    read without them, from their ``response_features`` count."""
    if column in rows.columns:
        return rows[column].str.len().to_numpy(dtype=float)
    return rows[{"response_a": CHARS_A, "response_b": CHARS_B}[column]].to_numpy(dtype=float)


def human_counts(df: pd.DataFrame) -> np.ndarray:
    """(rows, 3) counts of the human labels a / b / tie of a prepared table."""
    n = df[HUMAN_N].to_numpy().astype(np.int64)
    ties = df[HUMAN_TIES].to_numpy().astype(np.int64)
    vote = np.nan_to_num(df[HUMAN_VOTE].to_numpy(dtype=float))
    a = np.rint(vote * n - 0.5 * ties).astype(np.int64)  # vote = (a + ties / 2) / n
    return np.stack([a, n - a - ties, ties], axis=1)


def cluster_codes(df: pd.DataFrame, by: str, pair: np.ndarray) -> np.ndarray:
    """Each row's cluster code: equal values of column ``by``, one cluster; ``"none"``: the pair
    (every pair its own cluster). A row without a value is a cluster of its own pair. ValueError
    naming the column when the table has no such column."""
    if not isinstance(by, str) or not by.strip():
        raise ValueError(f"cluster_by: expected a column name or 'none', got {by!r}")
    if by == "none":
        return np.asarray(pair, dtype=np.int64)
    if by not in df.columns:
        names = ", ".join(c for c in map(str, df.columns) if not c.startswith("_jb_"))
        raise ValueError(f"cluster_by: the table has no column {by!r} to cluster by (columns: {names}; "
                         "'none' treats every pair as independent)")
    codes = np.asarray(pd.factorize(df[by], use_na_sentinel=True)[0], dtype=np.int64)
    lone = codes < 0
    if lone.any():  # no value: nothing shared that we can see; its pair is its cluster
        codes[lone] = codes.max(initial=-1) + 1 + np.asarray(pair, dtype=np.int64)[lone]
    return codes


def clusters(rows: pd.DataFrame, keep: np.ndarray | None = None) -> Clusters:
    """The clusters of a figure's units: the prepared rows (``keep``: the ones it uses)."""
    codes = rows[CLUSTER].to_numpy() if CLUSTER in rows.columns else \
        np.arange(len(rows), dtype=np.int64)
    by = rows.attrs.get(CLUSTER_BY, DEFAULT_CLUSTER_BY) if CLUSTER in rows.columns else "none"
    out = Clusters(np.asarray(codes, dtype=np.int64), by)
    return out if keep is None else out.subset(keep)


def column_clusters(rows: pd.DataFrame, by: str = DEFAULT_CLUSTER_BY) -> Clusters:
    """The clusters of an unprepared table's rows (a probe's: one row per pair) from column ``by``
    when it has one (a row without a value stands alone), else every row its own cluster."""
    if by != "none" and by in rows.columns:
        return Clusters.of(rows[by].to_numpy(dtype=object), by)
    return Clusters.independent(len(rows))


def prepare(df: pd.DataFrame, cluster_by: str | None = None) -> pd.DataFrame:
    """Add the ``_jb_`` feature columns (only those not already present) to a copy of ``df``.
    ``cluster_by``: the column whose equal values share a cluster (default the prompt; ``"none"``:
    pairs are independent); given for a prepared table, the clusters are recomputed if it differs."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"expected a pandas DataFrame, got {type(df).__name__}")
    if all(c in df.columns for c in DERIVED) and \
            (cluster_by is None or df.attrs.get(CLUSTER_BY) == cluster_by):
        return df
    if len(df) == 0:
        raise ValueError("the judgment table has no rows")
    new: dict[str, np.ndarray] = {}
    if PAIR in df.columns:
        pair = df[PAIR].to_numpy()
    else:
        require(df, ["pair_id"], "judgment table")
        pair = new[PAIR] = pd.factorize(df["pair_id"], use_na_sentinel=True)[0].astype(np.int64)
        if (pair < 0).any():
            raise ValueError(f"column 'pair_id': row {int(np.flatnonzero(pair < 0)[0]) + 1} has no pair id")
    by = cluster_by or df.attrs.get(CLUSTER_BY) or (DEFAULT_CLUSTER_BY if DEFAULT_CLUSTER_BY in df.columns
                                                    else "none")
    if CLUSTER not in df.columns or by != df.attrs.get(CLUSTER_BY):
        new[CLUSTER] = cluster_codes(df, by, pair)
    if any(c not in df.columns for c in (HUMAN, HUMAN_VOTE, HUMAN_N, HUMAN_TIES)):
        if "human" in df.columns:
            # Labels belong to the pair (``tables.pairwise.pairs``): every row of a pair gets the labels of
            # its row with the most of them, so human-only rows label the judges' rows too.
            lens = _arrow_list_lengths(df["human"])
            if lens is None:
                maj, vote, n_labels, ties = human_features(df["human"])
                best = _best_row_per_pair(pair, n_labels)
            else:  # Arrow lists (a large table): only each pair's best row is read, then spread
                best = _best_row_per_pair(pair, lens)
                read = np.zeros(len(df), dtype=bool)
                read[best] = True
                rows = np.flatnonzero(read)
                maj, vote, n_labels, ties = human_features(df["human"].iloc[rows])
                best = (np.cumsum(read) - 1)[best]  # positions among the rows read
            new[HUMAN], new[HUMAN_VOTE], new[HUMAN_N] = maj[best], vote[best], n_labels[best]
            new[HUMAN_TIES] = ties[best]
        else:
            new[HUMAN] = np.full(len(df), MISSING, dtype=np.int8)
            new[HUMAN_VOTE], new[HUMAN_N] = np.full(len(df), np.nan), np.zeros(len(df), dtype=np.int64)
            new[HUMAN_TIES] = np.zeros(len(df), dtype=np.int64)
    if CHOICE not in df.columns or VOTE not in df.columns:
        p = _float_col(df, "p_a")
        verdict = label_codes(df["verdict"], "verdict") if "verdict" in df.columns else \
            np.full(len(df), MISSING, dtype=np.int8)
        new[CHOICE] = choice_codes(p, verdict)
        new[VOTE] = vote_for_a(p, verdict)
    if any(c not in df.columns for c in (WORDS_A, WORDS_B, *MD_A, *MD_B)):
        require(df, ["response_a", "response_b"], "judgment table")
        # Word and markdown counts are properties of the pair: count each pair's texts once.
        _, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
        for col, words, markdown in (("response_a", WORDS_A, MD_A), ("response_b", WORDS_B, MD_B)):
            new[words] = word_counts(df[col], first)[inverse]
            counts = markdown_counts(df[col].iloc[first])
            for name, target in zip(MARKDOWN, markdown, strict=True):
                new[target] = counts[name][inverse]
    # A shallow copy: with copy-on-write the caller's frame is untouched and the texts are shared.
    if any(c in df.columns for c in new) or not df.index.is_unique:
        out = df.copy(deep=False).assign(**new)
    else:
        # ``assign`` copies every numpy array it is given (pandas 3): the new columns joined as they
        # are instead (0.4 GB less at the peak of ten million rows), same columns in the same order.
        out = pd.concat([df, pd.DataFrame(new, index=df.index, copy=False)], axis=1)
        out.attrs = copy.deepcopy(df.attrs)
    out.attrs[CLUSTER_BY] = by
    return out


def _best_row_per_pair(pair: np.ndarray, n_labels: np.ndarray) -> np.ndarray:
    """For each row, the index of the row of its pair holding the most human labels."""
    if pair.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-n_labels, pair))
    sorted_pair = pair[order]
    starts = np.r_[True, sorted_pair[1:] != sorted_pair[:-1]]
    best_of_pair = np.empty(int(pair.max()) + 1, dtype=np.int64)
    best_of_pair[sorted_pair[starts]] = order[starts]
    return best_of_pair[pair]


def _float_col(df: pd.DataFrame, column: str) -> np.ndarray:
    if column not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[column], errors="raise").to_numpy(dtype=float, na_value=np.nan)


def float_col(df: pd.DataFrame, column: str) -> np.ndarray:
    """A numeric column as float64 (NaN for missing; all-NaN when the column is absent)."""
    return _float_col(df, column)


def has_values(df: pd.DataFrame, column: str) -> bool:
    return column in df.columns and bool(df[column].notna().any())


def judge_rows(df: pd.DataFrame, judge: str, what: str) -> pd.DataFrame:
    """The prepared rows of one judge; ValueError when the judge is not in the table."""
    require(df, ["judge"], what)
    if not isinstance(judge, str) or not judge:
        raise ValueError(f"{what}: judge must be a non-empty name, got {judge!r}")
    mask = (df["judge"] == judge).to_numpy(dtype=bool, na_value=False)
    if not mask.any():
        judges = sorted(str(j) for j in df["judge"].dropna().unique())[:10]
        raise ValueError(f"{what}: judge {judge!r} has no rows (judges in the table: {judges})")
    rows = df if mask.all() else df.loc[mask]
    return prepare(rows)


def isin(values: pd.Series, names) -> np.ndarray:
    """``values.isin(names)`` as a bool array; on a categorical only the categories are compared."""
    names = list(names)
    if isinstance(values.dtype, pd.CategoricalDtype):
        hit = values.cat.categories.isin(names)
        codes = values.cat.codes.to_numpy()
        return np.where(codes >= 0, hit[np.maximum(codes, 0)], False) if hit.size else \
            np.zeros(len(values), dtype=bool)
    return values.isin(names).to_numpy(dtype=bool)


def distinct_rows(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(each row's index among the distinct rows, the distinct rows as a matrix) of equal-length
    columns of small non-negative integers, the distinct rows in lexicographic order: counted by
    their mixed-radix value in one pass (no sort, no table-sized copy of the columns) where that
    value stays under a few million, else by ``np.unique``."""
    cols = [np.asarray(c) for c in columns]
    if not cols or any(c.ndim != 1 or c.shape != cols[0].shape for c in cols) or \
            any(c.size and (not np.issubdtype(c.dtype, np.integer) or c.min() < 0) for c in cols):
        raise ValueError("distinct_rows: expected equal-length columns of non-negative integers")
    if cols[0].size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, len(cols)), dtype=np.int64)
    radix = [int(c.max()) + 1 for c in cols]
    if math.prod(radix) > _DENSE_KEYS:
        distinct, code = np.unique(np.column_stack(cols).astype(np.int64), axis=0, return_inverse=True)
        return code.reshape(-1), distinct
    key = np.zeros(cols[0].size, dtype=np.int64)
    for c, r in zip(cols, radix, strict=True):
        key *= r
        key += c
    present = np.flatnonzero(np.bincount(key))
    index = np.zeros(int(key.max()) + 1, dtype=np.int64)
    index[present] = np.arange(present.size)
    distinct = np.empty((present.size, len(cols)), dtype=np.int64)
    rest = present
    for j in reversed(range(len(cols))):
        rest, distinct[:, j] = np.divmod(rest, radix[j])
    return index[key], distinct


_DENSE_KEYS = 4_000_000


def judges(df: pd.DataFrame) -> list[str]:
    """Judge names present in the table (human-only rows have no judge)."""
    if "judge" not in df.columns:
        return []
    return sorted(str(j) for j in df["judge"].dropna().unique() if str(j).strip())


def human_reasons(human: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The exclusion rules for rows without a usable (non-tie majority) human label, in counting order."""
    return [("no_human_label", human == MISSING), ("human_no_majority", human == NO_MAJORITY),
            ("human_tie", human == TIE)]


def judge_reasons(choice: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The exclusion rules for rows without a non-tie judge choice, in counting order."""
    return [("judge_missing", choice == MISSING), ("judge_tie", choice == TIE)]
