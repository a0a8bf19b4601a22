"""One column of a judgment table read at once: missing values, booleans, labels and names mapped
per distinct value instead of per row. Each function returns exactly what its per-value rule
(``is_missing``, ``judgebias.tables.labels.normalize_label``) would give row by row;
``judgebias.tables.pairwise.validate`` uses them so that a table of millions of rows is checked
without a Python call per row."""

from __future__ import annotations

import math
from itertools import chain, islice

import numpy as np
import pandas as pd

from judgebias.tables.labels import LABELS, as_label_list, normalize_label


def is_missing(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and value.strip() == ""


# --- vectorized helpers of ``validate`` -------------------------------------------------------
# Each returns exactly what the per-value functions above would, computed column-wise when the
# column's dtype allows it and falling back to the per-value function otherwise (mixed objects).

_SAFE_INFERRED = ("string", "empty", "floating", "integer", "mixed-integer-float", "decimal")


def inferred(values: pd.Series) -> str:
    return pd.api.types.infer_dtype(values, skipna=True)


def is_text_dtype(values: pd.Series) -> bool:
    if isinstance(values.dtype, pd.CategoricalDtype):
        return is_text_categorical(values)
    return isinstance(values.dtype, pd.StringDtype) or (values.dtype == object and inferred(values) in
                                                        ("string", "empty"))


def is_text_categorical(values: pd.Series) -> bool:
    """A categorical whose categories are all text (``judgebias.tables.for_analysis.read_for_analysis``
    reads texts and names so): its checks run once per category."""
    if not isinstance(values.dtype, pd.CategoricalDtype):
        return False
    categories = values.cat.categories
    if isinstance(categories.dtype, pd.ArrowDtype):
        import pyarrow as pa

        arrow_type = categories.dtype.pyarrow_dtype
        return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    return isinstance(categories.dtype, pd.StringDtype) or \
        inferred(pd.Series(categories)) in ("string", "empty")


def value_codes(values: pd.Series) -> tuple[np.ndarray, pd.Index | np.ndarray]:
    """(codes, distinct values) as ``pd.factorize(values, use_na_sentinel=True)`` gives them, read
    off a categorical's own codes instead of hashing every row (equal values, equal codes; -1:
    missing)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return values.cat.codes.to_numpy(), values.cat.categories
    return pd.factorize(values, use_na_sentinel=True)


def _blank_texts(texts) -> np.ndarray:
    """Empty or whitespace-only, per text of a sequence of strings (Arrow kernels when Arrow-backed)."""
    if hasattr(texts, "array") and hasattr(texts.array, "__arrow_array__"):
        import pyarrow as pa
        import pyarrow.compute as pc

        arr = pa.array(texts.array)
        blank = pc.or_(pc.equal(pc.utf8_length(arr), 0), pc.utf8_is_space(arr)).fill_null(False)
        return np.asarray(blank.to_numpy(zero_copy_only=False), dtype=bool)
    return np.fromiter((u.strip() == "" for u in texts), dtype=bool, count=len(texts))


def missing_mask(values: pd.Series, factorized: tuple | None = None) -> np.ndarray:
    if pd.api.types.is_bool_dtype(values.dtype):
        return np.zeros(len(values), dtype=bool)
    if pd.api.types.is_numeric_dtype(values.dtype):
        return values.isna().to_numpy(dtype=bool)
    if is_text_categorical(values):
        codes, categories = value_codes(values)
        return np.append(_blank_texts(categories), True)[codes]
    if is_text_dtype(values):
        na = values.isna().to_numpy(dtype=bool)
        if hasattr(values.array, "__arrow_array__"):
            # Arrow kernels test for blank text without building stripped copies of long texts.
            import pyarrow as pa
            import pyarrow.compute as pc

            arr = pa.array(values.array)
            blank = pc.or_(pc.equal(pc.utf8_length(arr), 0), pc.utf8_is_space(arr)).fill_null(False)
            return na | np.asarray(blank.to_numpy(zero_copy_only=False), dtype=bool)
        # By distinct value: rows often share one text object (read_for_analysis), and no stripped
        # copy of every text is made.
        codes, uniques = factorized if factorized is not None else pd.factorize(values, use_na_sentinel=True)
        blank = np.fromiter((u.strip() == "" for u in uniques), dtype=bool, count=len(uniques))
        return np.append(blank, True)[codes]
    return values.map(is_missing).to_numpy(dtype=bool)


def bool_mask(values: pd.Series) -> np.ndarray:
    if pd.api.types.is_bool_dtype(values.dtype) and values.dtype != object:
        return values.notna().to_numpy(dtype=bool)
    if values.dtype != object or inferred(values) in _SAFE_INFERRED:
        return np.zeros(len(values), dtype=bool)
    return values.map(lambda v: isinstance(v, bool)).to_numpy(dtype=bool)


def first_labels_by_value(values: pd.Series) -> tuple[np.ndarray, np.ndarray, dict[int, str]] | None:
    """A one-label column (``verdict``...) parsed once per distinct value: (per-row first label or
    None, per-row "more than one label" mask, {row: error message}), exactly what parsing each row's
    spelling with ``as_label_list`` and taking its first label gives. None where ``labels_by_value``
    would parse per row."""
    if values.dtype == object and inferred(values) not in _SAFE_INFERRED:
        return None
    try:
        codes, uniques = value_codes(values)
    except TypeError:
        return None
    first_u = np.empty(len(uniques) + 1, dtype=object)
    multi_u = np.zeros(len(uniques) + 1, dtype=bool)
    bad_u = np.zeros(len(uniques) + 1, dtype=bool)
    errors_u: dict[int, str] = {}
    for k, u in enumerate(uniques):
        try:
            parsed = as_label_list(u)
        except ValueError as exc:
            errors_u[k], bad_u[k], parsed = str(exc), True, []
        first_u[k] = parsed[0] if parsed else None
        multi_u[k] = len(parsed) > 1
    first_u[-1] = None  # NA sentinel (-1)
    errors = {int(i): errors_u[int(codes[i])] for i in np.flatnonzero(bad_u[codes])} if errors_u else {}
    return first_u[codes], multi_u[codes], errors


def arrow_label_lists(values: pd.Series):
    """The ``human`` column kept as Arrow lists when every label in it is already "a", "b" or "tie"
    (what ``label_lists`` would return row by row, without a Python list per row); a missing list
    becomes an empty one, as there. None for anything else (the caller parses per row)."""
    if not isinstance(values.dtype, pd.ArrowDtype):
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    arrow_type = values.dtype.pyarrow_dtype
    if not (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
        return None
    if not (pa.types.is_string(arrow_type.value_type) or pa.types.is_large_string(arrow_type.value_type)):
        return None
    arr = pa.chunked_array(pa.array(values.array)) if not isinstance(values.array, pa.ChunkedArray) else \
        values.array
    arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    flat = pc.list_flatten(arr)
    canonical = pc.all(pc.is_in(pc.unique(flat), pa.array(LABELS))).as_py() is not False  # null: no labels
    if flat.null_count or not canonical:
        return None
    if arr.null_count:  # a missing list is an empty one: same offsets with no values between
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
        width = np.int64 if pa.types.is_large_list(arrow_type) else np.int32
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(width)
        arr = type(arr).from_arrays(pa.array(offsets), flat)
    return pd.Series(pd.arrays.ArrowExtensionArray(arr), index=values.index)


def map_by_value(values: pd.Series, fn) -> pd.Series:
    """``values.map(fn)`` as an object Series, calling ``fn`` once per distinct value of a text (or
    all-missing) column, once per row otherwise (hashing would confuse 1 with 1.0 and True). Rows
    of one value share one result object: a name repeated on ten million rows is stored once."""
    if values.isna().all():
        return pd.Series(np.full(len(values), fn(None), dtype=object), index=values.index, dtype=object)
    if not is_text_dtype(values):
        return values.map(fn).astype(object)
    codes, uniques = value_codes(values)
    lut = np.empty(len(uniques) + 1, dtype=object)
    for k, u in enumerate(uniques):
        lut[k] = fn(u)
    lut[-1] = fn(None)
    return pd.Series(lut[codes], index=values.index, dtype=object)


def map_categories(values: pd.Series, fn) -> pd.Series:
    """``map_by_value`` of a text categorical (``is_text_categorical``) kept categorical: ``fn`` once
    per category, categories it maps to one value merged, ``None`` results missing; a name on ten
    million rows then costs a small integer code per row, not an object pointer. Where ``fn`` maps a
    missing value to anything but ``None``: ``map_by_value``."""
    if fn(None) is not None:
        return map_by_value(values, fn)
    mapped = pd.Series([fn(c) for c in values.cat.categories], dtype=object)
    new_codes, uniques = pd.factorize(mapped, use_na_sentinel=True)
    remap = np.append(new_codes, -1).astype(np.int32)  # a missing row's code -1 reads the last slot
    codes = remap[values.cat.codes.to_numpy()]
    return pd.Series(pd.Categorical.from_codes(codes, categories=pd.Index(uniques, dtype=object)),
                     index=values.index)


_LIST_TYPES = (list, tuple, np.ndarray)
_CANONICAL_SET = frozenset(LABELS)


def label_lists(values: pd.Series) -> tuple[list, dict[int, str]]:
    """Per-row label lists of a list-valued column (``human``). Lists of plain strings are parsed
    by distinct label; any other row goes through ``as_label_list`` one by one."""
    # An Arrow list column's missing rows read as None (as a Parquet file read by pandas gives them).
    raw = values.to_numpy(dtype=object, na_value=None) if isinstance(values.dtype, pd.ArrowDtype) else \
        values.to_numpy(dtype=object)
    n = raw.size
    is_list = np.fromiter((type(v) in _LIST_TYPES for v in raw), dtype=bool, count=n)
    out: list = [None] * n
    errors: dict[int, str] = {}
    list_rows = np.flatnonzero(is_list)
    fast_done = False
    if list_rows.size:
        items = raw[list_rows]
        lens = np.fromiter(map(len, items), dtype=np.int64, count=items.size)
        flat = list(chain.from_iterable(items))
        containers = set(map(type, items))
        # Parquet's list columns arrive as object arrays of str: the same fast path as lists.
        distinct = set(flat) if containers <= {list, np.ndarray} else None
        if (distinct is not None and distinct <= _CANONICAL_SET
                and (containers <= {list} or set(map(type, flat)) <= {str})):
            # The common case, lists of normalized labels: fresh copies, nothing to parse.
            copies = list(map(list, items))
            if list_rows.size == n:
                return copies, errors
            for pos, copy in zip(list_rows.tolist(), copies, strict=True):
                out[pos] = copy
            fast_done = True
        elif set(map(type, flat)) <= {str}:
            fast_done = True
            codes, uniques = pd.factorize(np.array(flat, dtype=object)) if flat else \
                (np.zeros(0, dtype=np.int64), np.array([], dtype=object))
            norm = np.empty(len(uniques), dtype=object)
            bad_u = np.zeros(len(uniques), dtype=bool)
            msg_u: dict[int, str] = {}
            for k, u in enumerate(uniques):
                try:
                    norm[k] = normalize_label(u)
                except ValueError as exc:
                    bad_u[k] = True
                    msg_u[k] = str(exc)
            owner = np.repeat(np.arange(items.size), lens)
            if bad_u.any():
                bad_pos = np.flatnonzero(bad_u[codes])
                first_owner, first_idx = np.unique(owner[bad_pos], return_index=True)
                for o, j in zip(first_owner, bad_pos[first_idx], strict=True):
                    errors[int(list_rows[o])] = msg_u[int(codes[j])]
            flat_norm = norm[codes] if len(flat) else np.zeros(0, dtype=object)
            keep = np.array([x is not None for x in norm], dtype=bool)[codes] if len(flat) else \
                np.zeros(0, dtype=bool)
            canonical = not errors and all(
                v is not None and v == u for v, u in zip(norm, uniques, strict=True))
            if canonical and set(map(type, items)) <= {list}:
                # Already normalized lists (the common case): fresh copies, nothing to rebuild.
                copies = list(map(list, items))
                if list_rows.size == n:
                    out = copies
                else:
                    for pos, copy in zip(list_rows.tolist(), copies, strict=True):
                        out[pos] = copy
            else:
                bad_rows = np.zeros(items.size, dtype=bool)
                if errors:
                    bad_rows[np.searchsorted(list_rows, np.array(sorted(errors)))] = True
                keep &= ~bad_rows[owner]
                kept_lens = np.bincount(owner[keep], minlength=items.size)
                it = iter(flat_norm[keep].tolist())
                for pos, k in zip(list_rows.tolist(), kept_lens.tolist(), strict=True):
                    out[pos] = list(islice(it, k))
    todo = np.flatnonzero(~is_list) if fast_done else np.arange(n)
    for i in todo.tolist():
        try:
            out[i] = as_label_list(raw[i])
        except ValueError as exc:
            errors[i] = str(exc)
            out[i] = []
    return out, errors


def hand_back_memory() -> None:
    """Return freed memory to the system (``read_for_analysis``; ``validate`` of a large table before
    its table-sized checks). Arrow's pool keeps freed buffers for reuse and glibc's heap keeps freed
    arrays under its mmap threshold (a read frees about as much as it keeps: 0.2 GB of 0.4 GB per
    million rows), so the next step would start from a peak it does not need. Best effort: nothing
    happens where glibc is not the allocator."""
    import contextlib
    import ctypes
    import gc

    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
