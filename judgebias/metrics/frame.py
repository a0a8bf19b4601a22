"""Vectorized per-row features shared by the metrics, computed once per table.

``prepare(df)`` returns a copy of a validated judgment table with integer-coded columns added
(names start with ``_jb_``): pair codes, human majority, judge choice, vote shares, word counts.
Every metric calls it; when the columns are already there (``analyze`` prepares once) it is free.
Codes: 0 = "a", 1 = "b", 2 = "tie", -1 = missing; human majority -2 = labels without a strict
majority.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain, pairwise

import numpy as np
import pandas as pd

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
DERIVED = (PAIR, HUMAN, HUMAN_VOTE, HUMAN_N, HUMAN_TIES, CHOICE, VOTE, WORDS_A, WORDS_B, *MD_A, *MD_B)

# A prepared table may have dropped a raw column once its feature is computed.
_ALIAS = {"human": HUMAN, "response_a": WORDS_A, "response_b": WORDS_B, "verdict": CHOICE}


def require(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns and _ALIAS.get(c) not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {', '.join(missing)}")


_CODE_OF = {"a": A, "b": B, "tie": TIE}


def label_codes(values: pd.Series, column: str) -> np.ndarray:
    """'a'/'b'/'tie'/None -> 0/1/2/-1, by factorizing (hash-based, the few distinct labels are then
    mapped in Python). Anything else is an error: tables are validated first."""
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    lut = np.empty(len(uniques) + 1, dtype=np.int8)
    lut[-1] = MISSING  # factorize's NA sentinel -1 indexes the last slot
    for i, u in enumerate(uniques):
        if u not in _CODE_OF:
            raise ValueError(f"column {column!r}: label {u!r} is not 'a', 'b' or 'tie' "
                             "(validate the table with judgebias.table.validate first)")
        lut[i] = _CODE_OF[u]
    return lut[codes]


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
                             "(validate the table with judgebias.table.validate first)")
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
    row = np.repeat(np.arange(n, dtype=np.int64), lens)
    counts = np.bincount(row * 3 + codes, minlength=3 * n).reshape(n, 3)
    top = counts.argmax(axis=1).astype(np.int8)
    has_majority = counts.max(axis=1) * 2 > lens
    majority = np.where(lens == 0, MISSING, np.where(has_majority, top, NO_MAJORITY)).astype(np.int8)
    with np.errstate(invalid="ignore", divide="ignore"):
        vote = (counts[:, A] + 0.5 * counts[:, TIE]) / lens
    return majority, np.where(lens == 0, np.nan, vote), lens, counts[:, TIE]


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
    return codes.to_numpy(zero_copy_only=False).astype(np.int64), lens


def human_counts(df: pd.DataFrame) -> np.ndarray:
    """(rows, 3) counts of the human labels a / b / tie of a prepared table."""
    n = df[HUMAN_N].to_numpy().astype(np.int64)
    ties = df[HUMAN_TIES].to_numpy().astype(np.int64)
    vote = np.nan_to_num(df[HUMAN_VOTE].to_numpy(dtype=float))
    a = np.rint(vote * n - 0.5 * ties).astype(np.int64)  # vote = (a + ties / 2) / n
    return np.stack([a, n - a - ties, ties], axis=1)


# Arena-Hard-Auto's counting rules (its style control's features, utils/add_markdown_info.py), so a
# style term means the same here as there. Code first: the text between two ``` fences that holds no
# backtick is dropped (fences kept), so "# comment" lines in code are not headers nor "- x" lines
# list items. Then, line-anchored: a header is 1-6 "#" at the very start of a line and whitespace;
# a list item optional whitespace, "-", "*", "+" or "1." and whitespace; bold "**x**" / "__x__" on
# one line. Counted by Arrow's RE2, whose \s and \d are ASCII where Python's are Unicode: the same
# counts on the 5,635 AlpacaEval outputs.
_CODE_BLOCK = (r"```[^`]*```", "``````")
_MARKDOWN_PATTERNS = {
    "headers": r"(?m)^#{1,6}\s",
    "lists": r"(?m)^\s*(?:\d+\.|[-*+])\s",
    "bold": r"\*\*[^*\n]+\*\*|__[^_\n]+__",
}


def markdown_counts(texts: pd.Series) -> dict[str, np.ndarray]:
    """Headers, list items and bold spans per text outside fenced code blocks, as Arena-Hard-Auto
    counts them for its style control; missing texts count 0. Counted by Arrow's RE2 in C++ (3-4x
    faster than pandas' ``str.count``: 0.3 s per 100k responses)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(texts.dtype, pd.CategoricalDtype):  # count each distinct text once
        codes = texts.cat.codes.to_numpy()
        per_text = markdown_counts(pd.Series(texts.cat.categories))
        return {name: np.append(v, 0)[codes] for name, v in per_text.items()}
    try:
        if isinstance(texts.dtype, pd.ArrowDtype):  # Arrow-backed text: no Python string per row
            arr = pa.array(texts.array)
            arr = (arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr).cast(pa.large_string())
        else:
            arr = pa.array(texts.to_numpy(dtype=object, na_value=None), from_pandas=True,
                           type=pa.large_string())
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"markdown counts need text values: {exc}") from None
    if _containing(arr, ("```",)).any():
        arr = pc.replace_substring_regex(arr, pattern=_CODE_BLOCK[0], replacement=_CODE_BLOCK[1])
    out = {}
    for name, pattern in _MARKDOWN_PATTERNS.items():
        # The regex runs only on the texts holding a character every match needs (a plain substring
        # search is several times faster than RE2 over the whole text); the others count 0.
        counts = np.zeros(len(arr), dtype=np.int64)
        rows = np.flatnonzero(_containing(arr, _MARKDOWN_NEEDS[name]))
        if rows.size:
            part = arr.take(pa.array(rows)) if rows.size < len(arr) else arr
            counts[rows] = pc.fill_null(pc.count_substring_regex(part, pattern), 0).to_numpy(
                zero_copy_only=False)
        out[name] = counts
    return out


# A substring that every match of each pattern contains (one of them, at least).
_MARKDOWN_NEEDS = {"headers": ("#",), "lists": ("-", "*", "+", "."), "bold": ("**", "__")}


def _containing(arr, needles: tuple[str, ...]) -> np.ndarray:
    """Rows of a text array holding any of ``needles`` (missing texts: False)."""
    import pyarrow.compute as pc

    hit = None
    for needle in needles:
        found = pc.match_substring(arr, needle)
        hit = found if hit is None else pc.or_(hit, found)
    return np.asarray(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), dtype=bool)


def word_counts(texts: pd.Series, rows: np.ndarray | None = None) -> np.ndarray:
    """Whitespace-separated word counts (like ``len(s.split())`` for ASCII whitespace) of
    ``texts`` (or of ``texts.iloc[rows]``), computed on the UTF-8 bytes with numpy: no per-row
    Python, so a million texts take about a second. Missing texts count 0 words."""
    import pyarrow as pa

    if rows is None:
        rows = np.arange(len(texts))
    rows = np.asarray(rows, dtype=np.int64)
    out = np.zeros(rows.size, dtype=np.int64)
    if rows.size == 0:
        return out
    if isinstance(texts.dtype, pd.CategoricalDtype):  # count each distinct text once
        codes = texts.cat.codes.to_numpy()[rows]
        used = np.unique(codes[codes >= 0])
        per_text = np.zeros(len(texts.cat.categories) + 1, dtype=np.int64)
        per_text[used] = word_counts(pd.Series(texts.cat.categories), used)
        return per_text[codes]
    try:  # arrow-backed strings (pandas' default "str" dtype) are read in place, chunk by chunk
        if hasattr(texts.array, "__arrow_array__"):
            chunked = pa.chunked_array(pa.array(texts.array))
        else:
            chunked = pa.chunked_array([pa.array(texts.to_numpy(dtype=object, na_value=None)[rows],
                                                 from_pandas=True)])
            rows = np.arange(rows.size)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"word counts need text values: {exc}") from None
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    start = 0
    for chunk in chunked.chunks:
        end = start + len(chunk)
        lo, hi = np.searchsorted(sorted_rows, [start, end])
        if hi > lo:
            # Take within one chunk: taking from the whole column would first concatenate it.
            part = chunk.take(pa.array(sorted_rows[lo:hi] - start))
            out[order[lo:hi]] = _array_word_counts(part)
        start = end
    return out


def _array_word_counts(arr) -> np.ndarray:
    import pyarrow as pa

    n = len(arr)
    if not pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_string())
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset: arr.offset + n + 1]
    data_buf = arr.buffers()[2]
    if data_buf is None or offsets[-1] == offsets[0]:
        return np.zeros(n, dtype=np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8)
    # Strings are processed in slices of about CHUNK_BYTES so the temporaries stay small.
    out = np.empty(n, dtype=np.int64)
    cuts = np.searchsorted(offsets, np.arange(offsets[0], offsets[-1], _CHUNK_BYTES), side="right") - 1
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 0, n), [n]]))
    for lo, hi in pairwise(bounds.tolist()):
        out[lo:hi] = _count_words(data, offsets[lo: hi + 1])
    return out


_CHUNK_BYTES = 16 * 2**20


def _count_words(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Word counts of the strings delimited by ``offsets`` (len = strings + 1) in ``data``."""
    if offsets[-1] == offsets[0]:
        return np.zeros(offsets.size - 1, dtype=np.int64)
    data = data[offsets[0]: offsets[-1]]
    offsets = offsets - offsets[0]
    # Whitespace as str.split() knows it in ASCII: 9-13, 28-31 and space. Every byte > 32 (UTF-8
    # multi-byte sequences included) is a word byte; the rare control bytes < 32 are fixed after.
    nonspace = data > 32
    ctrl = np.flatnonzero(data < 32)
    nonspace[ctrl] = ((data[ctrl] < 9) | (data[ctrl] > 13)) & ((data[ctrl] < 28) | (data[ctrl] > 31))
    starts = np.empty_like(nonspace)
    starts[0] = nonspace[0]
    np.greater(nonspace[1:], nonspace[:-1], out=starts[1:])  # a word byte after a space byte
    begin = offsets[:-1][np.diff(offsets) > 0]
    starts[begin] = nonspace[begin]  # a word can start at a string's first byte whatever precedes it
    positions = np.flatnonzero(starts)
    # Word starts are sorted, so each string's count is a difference of two binary searches.
    return np.diff(np.searchsorted(positions, offsets)).astype(np.int64)


def prepare(df: pd.DataFrame) -> pd.DataFrame:
    """Add the ``_jb_`` feature columns (only those not already present) to a copy of ``df``."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"expected a pandas DataFrame, got {type(df).__name__}")
    if all(c in df.columns for c in DERIVED):
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
    if any(c not in df.columns for c in (HUMAN, HUMAN_VOTE, HUMAN_N, HUMAN_TIES)):
        if "human" in df.columns:
            maj, vote, n_labels, ties = human_features(df["human"])
            # Labels belong to the pair (``table.pairs``): every row of a pair gets the labels of
            # its row with the most of them, so human-only rows label the judges' rows too.
            best = _best_row_per_pair(pair, n_labels)
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
    return df.copy(deep=False).assign(**new)


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
