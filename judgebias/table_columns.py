"""One column of a judgment table read at once: missing values, booleans, labels and names mapped
per distinct value instead of per row. Each function returns exactly what its per-value rule
(``is_missing``, ``judgebias.labels.normalize_label``) would give row by row; ``judgebias.table.validate``
uses them so that a table of millions of rows is checked without a Python call per row."""

from __future__ import annotations

import math
from itertools import chain, islice

import numpy as np
import pandas as pd

from judgebias.labels import LABELS, as_label_list, normalize_label


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
    return isinstance(values.dtype, pd.StringDtype) or (values.dtype == object and inferred(values) in
                                                        ("string", "empty"))


def missing_mask(values: pd.Series, factorized: tuple | None = None) -> np.ndarray:
    if pd.api.types.is_bool_dtype(values.dtype):
        return np.zeros(len(values), dtype=bool)
    if pd.api.types.is_numeric_dtype(values.dtype):
        return values.isna().to_numpy(dtype=bool)
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


def labels_by_value(values: pd.Series) -> tuple[list, dict[int, str]] | None:
    """Parse a column of scalar label spellings once per distinct value (factorize), not per row.
    Returns (per-row parsed label lists, {row: error message}); None when the column holds values
    that hashing could confuse (True == 1) or cannot hash (lists): the caller parses per row."""
    if values.dtype == object and inferred(values) not in _SAFE_INFERRED:
        return None
    try:
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
    except TypeError:
        return None
    parsed_uniques: list = []
    errors_u: dict[int, str] = {}
    for k, u in enumerate(uniques):
        try:
            parsed_uniques.append(as_label_list(u))
        except ValueError as exc:
            errors_u[k] = str(exc)
            parsed_uniques.append([])
    lut = np.empty(len(uniques) + 1, dtype=object)
    for k, parsed in enumerate(parsed_uniques):  # one by one: numpy would unpack nested lists
        lut[k] = parsed
    lut[-1] = []  # NA sentinel (-1)
    per_row = lut[codes]
    errors = {}
    if errors_u:
        bad_codes = np.array(sorted(errors_u))
        for i in np.flatnonzero(np.isin(codes, bad_codes)):
            errors[int(i)] = errors_u[int(codes[i])]
    return per_row.tolist(), errors


def map_by_value(values: pd.Series, fn) -> pd.Series:
    """``values.map(fn)`` as an object Series, calling ``fn`` once per distinct value of a text (or
    all-missing) column, once per row otherwise (hashing would confuse 1 with 1.0 and True). Rows
    of one value share one result object: a name repeated on ten million rows is stored once."""
    if values.isna().all():
        return pd.Series(np.full(len(values), fn(None), dtype=object), index=values.index, dtype=object)
    if not is_text_dtype(values):
        return values.map(fn).astype(object)
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    lut = np.empty(len(uniques) + 1, dtype=object)
    for k, u in enumerate(uniques):
        lut[k] = fn(u)
    lut[-1] = fn(None)
    return pd.Series(lut[codes], index=values.index, dtype=object)


_LIST_TYPES = (list, tuple, np.ndarray)
_CANONICAL_SET = frozenset(LABELS)


def label_lists(values: pd.Series) -> tuple[list, dict[int, str]]:
    """Per-row label lists of a list-valued column (``human``). Lists of plain strings are parsed
    by distinct label; any other row goes through ``as_label_list`` one by one."""
    raw = values.to_numpy(dtype=object)
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
