"""What a response's text looks like, counted once per distinct text: words (whitespace-separated, as
``str.split``) and markdown elements (headers, list items, bold) by Arena-Hard-Auto's rules. The
verbosity and style figures read them through ``frame.prepare``."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pandas as pd

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
    # The regexes run only on the texts holding a character every match needs (one pass over the
    # bytes for all three and the fences; RE2 over every whole text is several times slower); the
    # others count 0. '`' is in every fence: where one is, the code is dropped and the bytes read again.
    has = _holding(arr, {**_MARKDOWN_NEEDS, "fence": "`"})
    if has.pop("fence").any():
        arr = pc.replace_substring_regex(arr, pattern=_CODE_BLOCK[0], replacement=_CODE_BLOCK[1])
        has = _holding(arr, _MARKDOWN_NEEDS)
    out = {}
    for name, pattern in _MARKDOWN_PATTERNS.items():
        counts = np.zeros(len(arr), dtype=np.int64)
        rows = np.flatnonzero(has[name])
        if rows.size:
            part = arr.take(pa.array(rows)) if rows.size < len(arr) else arr
            counts[rows] = pc.fill_null(pc.count_substring_regex(part, pattern), 0).to_numpy(
                zero_copy_only=False)
        out[name] = counts
    return out


# Characters that every match of each pattern contains (one of them, at least): "**" and "__" need
# their character, a list item its marker, a header its "#".
_MARKDOWN_NEEDS = {"headers": "#", "lists": "-*+.", "bold": "*_"}


def _holding(arr, groups: dict[str, str]) -> dict[str, np.ndarray]:
    """Per name of ``groups``: the rows of an Arrow text array holding any of its ASCII characters
    (missing texts: False), all read off the UTF-8 bytes in one numpy pass, slice by slice."""
    import pyarrow as pa

    if not pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_string())
    lut = np.zeros(256, dtype=np.uint8)
    for bit, group in enumerate(groups.values()):
        for ch in group:
            lut[ord(ch)] |= np.uint8(1 << bit)
    n = len(arr)
    bits = np.zeros(n, dtype=np.uint8)
    data_buf = arr.buffers()[2]
    if n and data_buf is not None:
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset: arr.offset + n + 1]
        data = np.frombuffer(data_buf, dtype=np.uint8)
        cuts = np.searchsorted(offsets, np.arange(offsets[0], offsets[-1], _CHUNK_BYTES), side="right") - 1
        bounds = np.unique(np.concatenate([[0], np.clip(cuts, 0, n), [n]]))
        for lo, hi in pairwise(bounds.tolist()):
            off = offsets[lo: hi + 1]
            starts = off[:-1] - off[0]
            full = np.flatnonzero(off[1:] > off[:-1])  # reduceat would give an empty text a byte
            if full.size:
                # Each non-empty text's bytes run from its start to the next non-empty one's.
                bits[lo + full] = np.bitwise_or.reduceat(lut[data[off[0]: off[-1]]], starts[full])
        if arr.null_count:
            bits[~np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)] = 0
    return {name: (bits & (1 << bit)) != 0 for bit, name in enumerate(groups)}


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
