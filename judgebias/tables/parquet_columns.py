"""Reading one Parquet text column as a pandas categorical, row group by row group.

A judgment table repeats each pair's texts on every judge's row of it. Read whole, a text column of
ten million rows decodes every copy at once (gigabytes) before they can be merged; here each row
group is decoded alone, each pair keeps the first text it was given, and a later row of the pair is
compared with that text (a string comparison, no hashing) and only kept apart when it differs.
Equal texts end with equal codes and different texts with different codes, as ``pd.factorize``
would give them, so validation (empty texts, a pair with two texts) reads the codes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def text_categorical(parquet_file, column: str, group: np.ndarray) -> pd.Categorical:
    """Column ``column`` of an open ``pyarrow.parquet.ParquetFile`` as a categorical whose categories
    are its distinct texts (read as a dictionary where the file was opened with ``read_dictionary``
    naming it, else as plain texts: the same result).

    ``group`` gives each row a non-negative integer (the row's pair); rows of one group are expected
    to hold one text, which makes the read cheap, but any grouping gives the same result."""
    return _categorical(*_read_texts(parquet_file, column, group))


def _read_texts(parquet_file, column: str, group: np.ndarray, seen=None) -> tuple[list, np.ndarray]:
    """(the texts kept, as Arrow arrays: each group's first text and every text that differs from
    its group's; each row's index among them, -1 where missing). ``seen``, when given, is called
    with each array of texts as it is kept."""
    import pyarrow as pa

    n_rows = parquet_file.metadata.num_rows
    group = np.asarray(group, dtype=np.int64)
    if group.shape != (n_rows,):
        raise ValueError(f"text_categorical: {group.size} group codes for {n_rows} rows")
    ref_of_group = np.full(int(group.max()) + 1 if n_rows else 0, -1, dtype=np.int64)
    texts: list = []        # arrays of texts: each group's reference, and the texts that differ from it
    starts = [0]            # index of each array's first text among all texts
    row_text = np.full(n_rows, -1, dtype=np.int64)  # index of each row's text; -1: missing
    start = 0
    for k in range(parquet_file.num_row_groups):
        col = parquet_file.read_row_group(k, columns=[column]).column(0)
        chunk = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        end = start + len(chunk)
        if pa.types.is_dictionary(chunk.type):
            dictionary = chunk.dictionary
            local = chunk.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        else:  # plain texts (hashing each row group's texts into a dictionary costs more than it saves
            # where a pair's rows lie in different row groups): a row's "code" is its position
            dictionary = chunk
            local = np.arange(len(chunk), dtype=np.int64)
            if chunk.null_count:
                local[~np.asarray(chunk.is_valid().to_numpy(zero_copy_only=False), dtype=bool)] = -1
        rows = np.flatnonzero(local >= 0)
        g, code = group[start:end][rows], local[rows]
        same = np.zeros(rows.size, dtype=bool)
        new = ref_of_group[g] < 0
        if new.any():  # groups met for the first time: their first row's text is their reference
            first_groups, first_at = np.unique(g[new], return_index=True)
            first_codes = code[new][first_at]
            _append(texts, starts, _pick(dictionary, first_codes), seen)
            ref_of_group[first_groups] = starts[-2] + np.arange(first_groups.size)
            local_ref = np.full(ref_of_group.size, -1, dtype=np.int64)
            local_ref[first_groups] = first_codes
            same = local_ref[g] == code  # the same dictionary entry: the same text
        ref = ref_of_group[g]
        todo = np.flatnonzero(~same)
        equal = same
        if todo.size:
            equal[todo] = _equal_to_refs(dictionary, code[todo], texts, starts, ref[todo])
        assigned = np.where(equal, ref, -1)
        differ = np.flatnonzero(~equal)
        if differ.size:  # a row whose text is not its group's: a text of its own
            _append(texts, starts, _pick(dictionary, code[differ]), seen)
            assigned[differ] = starts[-2] + np.arange(differ.size)
        row_text[start:end][rows] = assigned
        start = end
        del col, chunk, dictionary
    return texts, row_text


def _append(texts: list, starts: list, values, seen=None) -> None:
    import pyarrow as pa

    texts.append(values.cast(pa.large_string()))
    starts.append(starts[-1] + len(values))
    if seen is not None:
        seen(texts[-1])


def _pick(arr, at: np.ndarray):
    """``arr.take(at)``; a slice (no copy) where ``at`` is a run of consecutive positions, as it is
    when each row group holds the same pairs in the same order, judge after judge."""
    import pyarrow as pa

    run = at.size and int(at[-1]) - int(at[0]) == at.size - 1
    if run and (at.size == 1 or bool((np.diff(at) == 1).all())):
        return arr.slice(int(at[0]), at.size)
    return arr.take(pa.array(at))


def _equal_to_refs(dictionary, codes: np.ndarray, texts: list, starts: list, refs: np.ndarray) -> np.ndarray:
    """Whether ``dictionary[codes[i]]`` equals text ``refs[i]``: taken array by array from ``texts``
    (never concatenating them all), then compared by Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = np.zeros(codes.size, dtype=bool)
    which = np.searchsorted(np.asarray(starts), refs, side="right") - 1
    for j in np.unique(which).tolist():
        at = np.flatnonzero(which == j)
        theirs = _pick(texts[j], refs[at] - starts[j])
        ours = _pick(dictionary, codes[at]).cast(pa.large_string())
        out[at] = np.asarray(pc.fill_null(pc.equal(ours, theirs), False).to_numpy(zero_copy_only=False),
                             dtype=bool)
    return out


def _categorical(texts: list, row_text: np.ndarray) -> pd.Categorical:
    """Codes over the distinct texts: equal texts (a prompt shared by several pairs, or a row that
    differs from its pair but equals another text) get one category."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not texts:
        return pd.Categorical.from_codes(np.full(row_text.size, -1, dtype=np.int32),
                                         categories=pd.Index([], dtype=object))
    encoded = pc.dictionary_encode(pa.chunked_array([t.cast(pa.large_string()) for t in texts]))
    categories = encoded.chunk(0).dictionary
    code_of_text = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in encoded.chunks])
    codes = np.where(row_text >= 0, code_of_text[np.maximum(row_text, 0)], -1).astype(np.int32)
    return distinct_categorical(codes, categories)


def distinct_categorical(codes: np.ndarray, categories) -> pd.Categorical:
    """A categorical from int codes over an Arrow text array whose values are distinct by
    construction (a dictionary encoding's, numbers written as text). pandas would hash every
    category to check it: 0.8 s per two million texts, four times per ten million rows."""
    index = pd.Index(pd.arrays.ArrowExtensionArray(categories))
    fastpath = getattr(pd.CategoricalDtype, "_from_fastpath", None)  # pandas-internal; else the check
    dtype = fastpath(index, False) if fastpath is not None else pd.CategoricalDtype(index)
    return pd.Categorical.from_codes(codes, dtype=dtype)


def text_stand_in(parquet_file, column: str, group: np.ndarray, features
                  ) -> tuple[pd.Categorical, dict[str, np.ndarray]]:
    """Column ``column`` read as ``text_categorical`` reads it, but its texts are not kept: each is
    given to ``features`` (an Arrow text array -> {name: one number per text}) once, when it is first
    met, and dropped after the column is read. Returns a stand-in categorical that validation reads
    as it reads the texts (equal texts of a pair equal codes, the same blank or missing rows: each
    non-blank text is replaced by a distinct number, a blank one is kept) and each feature per row
    (0 where the text is missing), as int32."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts: dict[str, list] = {}
    blank_parts: list = []
    blank_texts: list = []

    def seen(values) -> None:
        for name, v in features(values).items():
            parts.setdefault(name, []).append(np.asarray(v))
        blank = np.asarray(pc.or_(pc.equal(pc.utf8_length(values), 0), pc.utf8_is_space(values))
                           .fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
        blank_parts.append(blank)
        if blank.any():
            blank_texts.append(values.filter(pa.array(blank)))

    texts, row_text = _read_texts(parquet_file, column, group, seen)
    del texts
    per_text = {name: np.append(np.concatenate(v), 0) for name, v in parts.items()}  # last: missing
    blank = np.concatenate(blank_parts) if blank_parts else np.zeros(0, dtype=bool)
    n_plain = int((~blank).sum())
    code_of_text = np.empty(blank.size, dtype=np.int64)
    code_of_text[~blank] = np.arange(n_plain)
    categories = pc.cast(pa.array(np.arange(n_plain, dtype=np.int64)), pa.large_string())
    if blank_texts:  # equal blank texts, one category (as a dictionary of the texts would have them)
        encoded = pc.dictionary_encode(pa.chunked_array(blank_texts).combine_chunks())
        code_of_text[blank] = n_plain + encoded.indices.to_numpy(zero_copy_only=False)
        categories = pa.concat_arrays([categories, encoded.dictionary.cast(pa.large_string())])
    codes = np.where(row_text >= 0, code_of_text[np.maximum(row_text, 0)] if blank.size else -1,
                     -1).astype(np.int32)
    at = np.where(row_text >= 0, row_text, blank.size)
    # Cast per text, then spread to the rows: one int32 column per feature, no int64 one beside it.
    columns = {name: v.astype(np.int32)[at] for name, v in per_text.items()}
    del at, row_text, per_text  # the row-sized indices are spent: not held while the categories are built
    stand_in = distinct_categorical(codes, categories)
    return stand_in, columns
