"""The judgment table: one row per (pair, judge), the interchange format of the whole project.

Columns (see docs/importers.md "The judgment table" for the full contract):

    pair_id       str   required, stable id of the (prompt, response_a, response_b) pair
    prompt        str   required
    response_a    str   required
    response_b    str   required
    generator_a   str   model that wrote response_a (empty when unknown)
    generator_b   str   model that wrote response_b
    judge         str   judge that produced p_a/verdict; empty for human-only rows
    p_a           float P(A better), averaged over both presentation orders; empty for verdict-only judges
    p_a_ab        float P(A better) with A shown first
    p_a_ba        float P(A better) with A shown second (already mapped back to the original A)
    verdict       str   "a" | "b" | "tie" | empty
    verdict_ab    str   per-order verdict (original terms), for judges that give only a verdict
    verdict_ba    str
    fold_rule     str   how verdict was folded from the two orders (judgebias.folding), filled here
    human         list  human labels, each "a" | "b" | "tie" (several annotators allowed)
    ppl_a, ppl_b  float the judge's perplexity of each response given the prompt

Any other column is carried through untouched.
"""

from __future__ import annotations

import math
from itertools import chain, islice

import numpy as np
import pandas as pd

from judgebias.exclusions import Exclusions
from judgebias.folding import DEFAULT_FOLD, FOLD_RULES, fold
from judgebias.labels import LABELS, _as_label_list, majority, normalize_label

REQUIRED = ("pair_id", "prompt", "response_a", "response_b")
TEXT_OPTIONAL = ("generator_a", "generator_b", "judge")
PROB_COLUMNS = ("p_a", "p_a_ab", "p_a_ba")
PPL_COLUMNS = ("ppl_a", "ppl_b")
VERDICT_COLUMNS = ("verdict", "verdict_ab", "verdict_ba")
CANONICAL = (*REQUIRED, *TEXT_OPTIONAL, *PROB_COLUMNS, *VERDICT_COLUMNS, "fold_rule", "human", *PPL_COLUMNS)

MAX_LISTED_PROBLEMS = 50


class TableError(ValueError):
    """A judgment table that cannot be used as it is; the message lists every problem found."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        shown = problems[:MAX_LISTED_PROBLEMS]
        more = len(problems) - len(shown)
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(f"{source}: {len(problems)} problem(s)\n  " + "\n  ".join(shown) + tail)


def _is_missing(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and value.strip() == ""


# --- vectorized helpers of ``validate`` -------------------------------------------------------
# Each returns exactly what the per-value functions above would, computed column-wise when the
# column's dtype allows it and falling back to the per-value function otherwise (mixed objects).

_SAFE_INFERRED = ("string", "empty", "floating", "integer", "mixed-integer-float", "decimal")


def _inferred(values: pd.Series) -> str:
    return pd.api.types.infer_dtype(values, skipna=True)


def _is_text_dtype(values: pd.Series) -> bool:
    return isinstance(values.dtype, pd.StringDtype) or (values.dtype == object and _inferred(values) in
                                                        ("string", "empty"))


def _missing_mask(values: pd.Series, factorized: tuple | None = None) -> np.ndarray:
    if pd.api.types.is_bool_dtype(values.dtype):
        return np.zeros(len(values), dtype=bool)
    if pd.api.types.is_numeric_dtype(values.dtype):
        return values.isna().to_numpy(dtype=bool)
    if _is_text_dtype(values):
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
    return values.map(_is_missing).to_numpy(dtype=bool)


def _bool_mask(values: pd.Series) -> np.ndarray:
    if pd.api.types.is_bool_dtype(values.dtype) and values.dtype != object:
        return values.notna().to_numpy(dtype=bool)
    if values.dtype != object or _inferred(values) in _SAFE_INFERRED:
        return np.zeros(len(values), dtype=bool)
    return values.map(lambda v: isinstance(v, bool)).to_numpy(dtype=bool)


def _labels_by_value(values: pd.Series) -> tuple[list, dict[int, str]] | None:
    """Parse a column of scalar label spellings once per distinct value (factorize), not per row.
    Returns (per-row parsed label lists, {row: error message}); None when the column holds values
    that hashing could confuse (True == 1) or cannot hash (lists): the caller parses per row."""
    if values.dtype == object and _inferred(values) not in _SAFE_INFERRED:
        return None
    try:
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
    except TypeError:
        return None
    parsed_uniques: list = []
    errors_u: dict[int, str] = {}
    for k, u in enumerate(uniques):
        try:
            parsed_uniques.append(_as_label_list(u))
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


def _map_by_value(values: pd.Series, fn) -> pd.Series:
    """``values.map(fn)`` as an object Series, calling ``fn`` once per distinct value of a text (or
    all-missing) column, once per row otherwise (hashing would confuse 1 with 1.0 and True). Rows
    of one value share one result object: a name repeated on ten million rows is stored once."""
    if values.isna().all():
        return pd.Series(np.full(len(values), fn(None), dtype=object), index=values.index, dtype=object)
    if not _is_text_dtype(values):
        return values.map(fn).astype(object)
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    lut = np.empty(len(uniques) + 1, dtype=object)
    for k, u in enumerate(uniques):
        lut[k] = fn(u)
    lut[-1] = fn(None)
    return pd.Series(lut[codes], index=values.index, dtype=object)


_LIST_TYPES = (list, tuple, np.ndarray)
_CANONICAL_SET = frozenset(LABELS)


def _label_lists(values: pd.Series) -> tuple[list, dict[int, str]]:
    """Per-row label lists of a list-valued column (``human``). Lists of plain strings are parsed
    by distinct label; any other row goes through ``_as_label_list`` one by one."""
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
            out[i] = _as_label_list(raw[i])
        except ValueError as exc:
            errors[i] = str(exc)
            out[i] = []
    return out, errors


def validate(df: pd.DataFrame, source: str = "<table>", *, skip_invalid: bool = False,
             fold_rule: str = DEFAULT_FOLD) -> tuple[pd.DataFrame, Exclusions]:
    """Check and normalize a judgment table.

    Every problem is named by source, row (1-based, as in the file) and field. With
    ``skip_invalid`` the offending rows are excluded and counted by reason instead of raising.
    Returns the normalized table (canonical columns first, extras after) and the exclusions.
    Column-wise (vectorized) where the dtypes allow: a million rows validate in seconds.
    A row with both presentation orders gets its ``verdict`` folded from them by its ``fold_rule``
    (``fold_rule`` here where the row names none); a given verdict that the rule contradicts is
    a problem of that row.
    """
    problems: list[str] = []
    bad_rows: dict[int, str] = {}
    missing_cols = [c for c in REQUIRED if c not in df.columns]
    if missing_cols:
        raise TableError(source, [f"missing required column(s): {', '.join(missing_cols)}"])

    # Shallow: with copy-on-write (pandas >= 3) the caller's frame is never modified, and the
    # texts are not duplicated in memory.
    out = df.copy(deep=False).reset_index(drop=True)
    row_no = np.arange(1, len(out) + 1)

    def flag(i: int, column: str, message: str) -> None:
        problems.append(f"row {row_no[i]}, field {column!r}: {message}")
        bad_rows.setdefault(i, f"invalid_{column}")

    factorized: dict[str, tuple] = {}

    def codes_of(column: str) -> tuple:  # once per column: hashing millions of texts is the cost
        if column not in factorized:
            factorized[column] = pd.factorize(out[column], use_na_sentinel=True)
        return factorized[column]

    for column in REQUIRED:
        values = out[column]
        shared = values.dtype == object and column != "pair_id" and _is_text_dtype(values)
        for i in np.flatnonzero(_missing_mask(values, codes_of(column) if shared else None)):
            flag(i, column, "is empty")
        for i in np.flatnonzero(_bool_mask(values)):
            flag(i, column, f"boolean {values.iat[i]!r} where text is expected")
        if column != "pair_id" and not _is_text_dtype(values):  # an id may be a number; a text may not
            other = ~values.map(lambda v: isinstance(v, str) or _is_missing(v) or isinstance(v, bool))
            for i in np.flatnonzero(other.to_numpy(dtype=bool)):
                v = values.iat[i]
                what = "a number" if isinstance(v, (int, float, np.number)) else f"a {type(v).__name__}"
                flag(i, column, f"{str(v)[:40]!r} is {what}, not text")
    out["pair_id"] = out["pair_id"].astype(str)

    for column in TEXT_OPTIONAL:
        if column not in out.columns:
            out[column] = None
        col = out[column]
        is_bool = _bool_mask(col)
        for i in np.flatnonzero(is_bool):
            flag(i, column, f"boolean {col.iat[i]!r} where a name is expected")
        # Stripped text, None where missing; object dtype keeps None as None (pandas 3 would turn a
        # str column's None into NaN).
        out[column] = _map_by_value(col, lambda v: None if _is_missing(v) or isinstance(v, bool)
                                    else str(v).strip())

    for column in (*PROB_COLUMNS, *PPL_COLUMNS):
        if column not in out.columns:
            out[column] = np.nan
            continue
        raw = out[column]
        if pd.api.types.is_numeric_dtype(raw.dtype) and not pd.api.types.is_bool_dtype(raw.dtype):
            numeric = raw.astype(float)
            not_number = np.zeros(len(raw), dtype=bool)
        else:
            bools = _bool_mask(raw)
            cleaned = raw.mask(pd.Series(bools, index=raw.index), np.nan) if bools.any() else raw
            numeric = pd.to_numeric(cleaned, errors="coerce")
            not_number = (numeric.isna().to_numpy(dtype=bool) & ~_missing_mask(raw))
        for i in np.flatnonzero(not_number):
            flag(i, column, f"{raw.iat[i]!r} is not a number")
        if column in PROB_COLUMNS:
            out_of_range = (numeric < 0) | (numeric > 1)
            for i in np.flatnonzero(out_of_range.to_numpy()):
                flag(i, column, f"{numeric.iat[i]} is outside [0, 1]")
        else:
            nonpositive = numeric <= 0
            for i in np.flatnonzero(nonpositive.to_numpy()):
                flag(i, column, f"perplexity {numeric.iat[i]} must be > 0")
        out[column] = numeric.astype(float)

    for column, as_list in (*((c, False) for c in VERDICT_COLUMNS), ("human", True)):
        if column not in out.columns:
            out[column] = [[] for _ in range(len(out))] if as_list else None
            continue
        values = out[column]
        by_value = None if as_list else _labels_by_value(values)
        lists, errors = by_value if by_value is not None else _label_lists(values)
        if as_list:
            for i in sorted(errors):
                flag(i, column, errors[i])
            out[column] = pd.Series(lists, index=out.index, dtype=object)
            continue
        lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        multi = np.flatnonzero(lens > 1)
        for i in sorted({*errors, *multi.tolist()}):
            if i in errors:
                flag(i, column, errors[i])
            else:
                flag(i, column, f"one verdict expected, got {values.iat[i]!r}")
        first = np.full(len(lists), None, dtype=object)
        nonempty = np.flatnonzero(lens > 0)
        if nonempty.size:
            first[nonempty] = [lists[i][0] for i in nonempty.tolist()]
        out[column] = pd.Series(first, index=out.index, dtype=object)

    _fold_orders(out, fold_rule, flag)
    # p_a is the mean of the two orders' P(A) where both are given: a row that says otherwise was
    # written by something that folded them differently, and every figure would read the wrong one.
    folded = (out["p_a_ab"] + out["p_a_ba"]) / 2
    for i in np.flatnonzero(((out["p_a"] - folded).abs() > 1e-3).to_numpy()):
        ab, ba = out["p_a_ab"].iat[i], out["p_a_ba"].iat[i]
        flag(i, "p_a", f"{out['p_a'].iat[i]:.4f} contradicts its two orders (p_a_ab {ab:.4f}, "
                       f"p_a_ba {ba:.4f}: mean {folded.iat[i]:.4f})")

    dup = out.duplicated(subset=["pair_id", "judge"], keep="first")
    for i in np.flatnonzero(dup.to_numpy()):
        key = (out["pair_id"].iat[i], out["judge"].iat[i])
        flag(i, "pair_id", f"duplicate (pair_id, judge) = {key!r}")
    # A pair_id names one (prompt, response_a, response_b) by two generators: gold, DBG and agreement
    # join judges on it, so rows that disagree would silently compare different texts or authors.
    pair = pd.factorize(out["pair_id"], use_na_sentinel=True)[0]
    for column in (*REQUIRED[1:], "generator_a", "generator_b"):
        for i in np.flatnonzero(_differs_from_first(codes_of(column)[0], pair)):
            flag(i, column, f"pair_id {out['pair_id'].iat[i]!r} has another {column} in an earlier row")

    exclusions = Exclusions()
    if problems:
        if not skip_invalid:
            raise TableError(source, problems)
        for i, reason in bad_rows.items():
            exclusions.add(reason, example=f"row {row_no[i]}")
        out = out.drop(index=list(bad_rows)).reset_index(drop=True)

    extras = [c for c in out.columns if c not in CANONICAL]
    return out[list(CANONICAL) + extras], exclusions


def _differs_from_first(codes: np.ndarray, pair: np.ndarray) -> np.ndarray:
    """Rows whose value differs from the first non-missing value of their pair, both given as
    factorize codes (-1: missing). Equal texts are equal codes: exact, and no per-row copy of the
    texts is made."""
    ok = (codes >= 0) & (pair >= 0)
    rows = np.flatnonzero(ok)
    first_code = np.full(int(pair.max()) + 1 if pair.size else 0, -1, dtype=np.int64)
    # Rows are in table order, so the first index of each pair among them is its first value.
    seen, first = np.unique(pair[rows], return_index=True)
    first_code[seen] = codes[rows[first]]
    ref = first_code[np.maximum(pair, 0)]
    return ok & (ref >= 0) & (codes != ref)


def _fold_orders(out: pd.DataFrame, default: str, flag) -> None:
    given = out["fold_rule"] if "fold_rule" in out.columns else pd.Series(None, index=out.index, dtype=object)
    given = _map_by_value(given, lambda v: None if _is_missing(v) else str(v).strip().lower())
    for i in np.flatnonzero(~given.isin([*FOLD_RULES, None]).to_numpy()):
        flag(i, "fold_rule", f"{given.iat[i]!r} is not a fold rule ({', '.join(FOLD_RULES)})")
    rules = given.where(given.isin(FOLD_RULES), default).to_numpy(dtype=object)
    folded, applied = fold(out, rules)
    verdict = out["verdict"].to_numpy(dtype=object).copy()
    has_fold, has_verdict = ~pd.isna(applied), ~pd.isna(verdict)
    for i in np.flatnonzero(has_fold & has_verdict & (verdict != folded)):
        per_order = ", ".join(f"{c}={out[c].iat[i]!r}" for c in (*VERDICT_COLUMNS[1:], *PROB_COLUMNS[1:])
                              if not _is_missing(out[c].iat[i]))
        flag(i, "verdict", f"{verdict[i]!r} contradicts its orders ({per_order}), which fold to "
                           f"{folded[i]!r} under {applied[i]!r}")
    fill = has_fold & ~has_verdict
    verdict[fill] = folded[fill]
    out["verdict"] = pd.Series(verdict, index=out.index, dtype=object)
    out["fold_rule"] = pd.Series(np.where(has_fold, applied, given.to_numpy(dtype=object)), index=out.index,
                                 dtype=object)


def judge_choice(df: pd.DataFrame) -> pd.Series:
    """The judge's hard choice per row: its verdict (folded from both orders by the row's
    ``fold_rule``), else from p_a (> 0.5 is A). Vectorized; returns "a" | "b" | "tie" or None."""
    p = df["p_a"].to_numpy(dtype=float)
    from_p = np.where(p > 0.5, "a", np.where(p < 0.5, "b", "tie")).astype(object)
    from_p[np.isnan(p)] = None
    verdict = df["verdict"].to_numpy(dtype=object)
    return pd.Series(np.where(pd.isna(verdict), from_p, verdict), index=df.index, dtype=object)


def human_label(df: pd.DataFrame) -> pd.Series:
    """Majority human label per row (None when no label or no strict majority)."""
    return df["human"].map(majority)


def pairs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per pair (the judge-independent columns), human labels merged across rows."""
    first = df.drop_duplicates("pair_id", keep="first").set_index("pair_id")
    cols = ["prompt", "response_a", "response_b", "generator_a", "generator_b"]
    out = first[cols].copy()
    humans = df.groupby("pair_id", sort=False)["human"].agg(
        lambda s: max(s, key=len) if len(s) else [])
    out["human"] = humans.reindex(out.index)
    return out.reset_index()
