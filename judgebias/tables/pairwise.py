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
    fold_rule     str   how verdict was folded from the two orders (judgebias.tables.folding), filled here
    human         list  human labels, each "a" | "b" | "tie" (several annotators allowed)
    ppl_a, ppl_b  float the judge's perplexity of each response given the prompt

Any other column is carried through untouched; names starting with ``_jb_`` are reserved (refused).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from judgebias.tables.columns import (
    arrow_label_lists,
    bool_mask,
    first_labels_by_value,
    hand_back_memory,
    is_missing,
    is_text_categorical,
    is_text_dtype,
    label_lists,
    map_by_value,
    map_categories,
    missing_mask,
    value_codes,
)
from judgebias.tables.exclusions import Exclusions
from judgebias.tables.folding import (
    APPLIED_OF_CODE,
    DEFAULT_FOLD,
    FOLD_RULES,
    NO_VERDICT,
    VERDICT_OF_CODE,
    fold_frame_codes,
    verdict_codes,
)
from judgebias.tables.labels import majority

REQUIRED = ("pair_id", "prompt", "response_a", "response_b")
TEXT_OPTIONAL = ("generator_a", "generator_b", "judge")
PROB_COLUMNS = ("p_a", "p_a_ab", "p_a_ba")
PPL_COLUMNS = ("ppl_a", "ppl_b")
VERDICT_COLUMNS = ("verdict", "verdict_ab", "verdict_ba")
CANONICAL = (*REQUIRED, *TEXT_OPTIONAL, *PROB_COLUMNS, *VERDICT_COLUMNS, "fold_rule", "human", *PPL_COLUMNS)

MAX_LISTED_PROBLEMS = 50

# Names the metrics give the columns they derive (``judgebias.metrics.frame``): a table's own column
# under such a name would be overwritten, or read as if it were the derived figure.
RESERVED_PREFIX = "_jb_"


def reserved_problems(columns, ours=()) -> list[str]:
    """One problem per column of ``columns`` whose name is reserved (``ours``: those the reader itself
    derived, e.g. ``read_for_analysis``'s response counts)."""
    return [f"column {c!r}: names starting with {RESERVED_PREFIX!r} are reserved for the columns "
            "judgebias derives; rename it" for c in columns
            if isinstance(c, str) and c.startswith(RESERVED_PREFIX) and c not in ours]


class TableError(ValueError):
    """A judgment table that cannot be used as it is; the message lists every problem found."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        shown = problems[:MAX_LISTED_PROBLEMS]
        more = len(problems) - len(shown)
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(f"{source}: {len(problems)} problem(s)\n  " + "\n  ".join(shown) + tail)


def validate(df: pd.DataFrame, source: str = "<table>", *, skip_invalid: bool = False,
             fold_rule: str = DEFAULT_FOLD, derived: tuple[str, ...] = ()) -> tuple[pd.DataFrame, Exclusions]:
    """Check and normalize a judgment table.

    Every problem is named by source, row (1-based, as in the file) and field. With
    ``skip_invalid`` the offending rows are excluded and counted by reason instead of raising.
    Returns the normalized table (canonical columns first, extras after) and the exclusions.
    Column-wise (vectorized) where the dtypes allow: a million rows validate in seconds.
    A row with both presentation orders gets its ``verdict`` folded from them by its ``fold_rule``
    (``fold_rule`` here where the row names none); a given verdict that the rule contradicts is
    a problem of that row. A column named ``_jb_...`` is refused (those names are the derived
    columns'), even with ``skip_invalid``: it is no row's problem; ``derived`` names the ones the
    caller added itself.
    """
    problems: list[str] = []
    bad_rows: dict[int, str] = {}
    missing_cols = [c for c in REQUIRED if c not in df.columns]
    if missing_cols:
        raise TableError(source, [f"missing required column(s): {', '.join(missing_cols)}"])
    reserved = reserved_problems(df.columns, derived)
    if reserved:
        raise TableError(source, reserved)

    # Shallow: with copy-on-write (pandas >= 3) the caller's frame is never modified, and the
    # texts are not duplicated in memory.
    out = df.copy(deep=False).reset_index(drop=True)
    row_no = np.arange(1, len(out) + 1)

    def flag(i: int, column: str, message: str) -> None:
        problems.append(f"row {row_no[i]}, field {column!r}: {message}")
        bad_rows.setdefault(i, f"invalid_{column}")

    factorized: dict[str, tuple] = {}
    not_text: set[str] = set()

    def codes_of(column: str) -> tuple:  # once per column: hashing millions of texts is the cost
        if column not in factorized:
            factorized[column] = value_codes(out[column])
        return factorized[column]

    for column in REQUIRED:
        values = out[column]
        shared = (values.dtype == object and column != "pair_id" and is_text_dtype(values)) or \
            is_text_categorical(values)
        for i in np.flatnonzero(missing_mask(values, codes_of(column) if shared else None)):
            flag(i, column, "is empty")
        for i in np.flatnonzero(bool_mask(values)):
            flag(i, column, f"boolean {values.iat[i]!r} where text is expected")
        if column != "pair_id" and not is_text_dtype(values):  # an id may be a number; a text may not
            other = ~values.map(lambda v: isinstance(v, str) or is_missing(v) or isinstance(v, bool))
            for i in np.flatnonzero(other.to_numpy(dtype=bool)):
                v = values.iat[i]
                what = "a number" if isinstance(v, (int, float, np.number)) else f"a {type(v).__name__}"
                flag(i, column, f"{str(v)[:40]!r} is {what}, not text")
                not_text.add(column)  # a dict or list cannot be hashed: the pair checks skip it
    if not is_text_categorical(out["pair_id"]):  # a categorical of texts (read_for_analysis) stays one
        out["pair_id"] = out["pair_id"].astype(str)

    for column in TEXT_OPTIONAL:
        if column not in out.columns:
            out[column] = None
        col = out[column]
        is_bool = bool_mask(col)
        for i in np.flatnonzero(is_bool):
            flag(i, column, f"boolean {col.iat[i]!r} where a name is expected")
        # Stripped text, None where missing; object dtype keeps None as None (pandas 3 would turn a
        # str column's None into NaN). A categorical (read_for_analysis) stays one: codes, not pointers.
        out[column] = (map_categories if is_text_categorical(col) else map_by_value)(col, _stripped_name)

    for column in (*PROB_COLUMNS, *PPL_COLUMNS):
        if column not in out.columns:
            out[column] = np.nan
            continue
        raw = out[column]
        if pd.api.types.is_numeric_dtype(raw.dtype) and not pd.api.types.is_bool_dtype(raw.dtype):
            numeric = raw.astype(float)
            not_number = np.zeros(len(raw), dtype=bool)
        else:
            bools = bool_mask(raw)
            cleaned = raw.mask(pd.Series(bools, index=raw.index), np.nan) if bools.any() else raw
            numeric = pd.to_numeric(cleaned, errors="coerce")
            not_number = (numeric.isna().to_numpy(dtype=bool) & ~missing_mask(raw))
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
        if as_list:
            kept = arrow_label_lists(values)  # already-normalized Arrow lists stay as they are
            if kept is not None:
                out[column] = kept
                continue
            lists, errors = label_lists(values)
            for i in sorted(errors):
                flag(i, column, errors[i])
            out[column] = pd.Series(lists, index=out.index, dtype=object)
            continue
        by_value = first_labels_by_value(values)
        if by_value is None:
            lists, errors = label_lists(values)
            lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
            first = np.full(len(lists), None, dtype=object)
            nonempty = np.flatnonzero(lens > 0)
            if nonempty.size:
                first[nonempty] = [lists[i][0] for i in nonempty.tolist()]
            multi = lens > 1
        else:
            first, multi, errors = by_value
        for i in sorted({*errors, *np.flatnonzero(multi).tolist()}):
            if i in errors:
                flag(i, column, errors[i])
            else:
                flag(i, column, f"one verdict expected, got {values.iat[i]!r}")
        out[column] = pd.Series(first, index=out.index, dtype=object)

    _fold_orders(out, fold_rule, flag)
    # p_a is the mean of the two orders' P(A) where both are given: a row that says otherwise was
    # written by something that folded them differently, and every figure would read the wrong one.
    folded = (out["p_a_ab"] + out["p_a_ba"]) / 2
    for i in np.flatnonzero(((out["p_a"] - folded).abs() > 1e-3).to_numpy()):
        ab, ba = out["p_a_ab"].iat[i], out["p_a_ba"].iat[i]
        flag(i, "p_a", f"{out['p_a'].iat[i]:.4f} contradicts its two orders (p_a_ab {ab:.4f}, "
                       f"p_a_ba {ba:.4f}: mean {folded.iat[i]:.4f})")

    # (pair_id, judge) repeated: ``DataFrame.duplicated`` on the two columns' codes (a missing value
    # equal to another, as there), the ids hashed once for this and the text checks below.
    if len(out) >= _FOLD_BLOCK:  # what the checks above freed, before the table-sized ones below
        hand_back_memory()
    pair = pd.factorize(out["pair_id"], use_na_sentinel=True)[0]
    pair = pair.astype(np.int32) if len(pair) < 2**31 - 1 else pair  # half the memory of each index
    for i in np.flatnonzero(_repeated(pair, value_codes(out["judge"])[0])):
        key = (out["pair_id"].iat[i], out["judge"].iat[i])
        flag(i, "pair_id", f"duplicate (pair_id, judge) = {key!r}")
    # A pair_id names one (prompt, response_a, response_b) by two generators: gold, DBG and agreement
    # join judges on it, so rows that disagree would silently compare different texts or authors.
    first_of_pair = _first_rows(pair) if pair.size and pair.min() >= 0 else None
    for column in (*REQUIRED[1:], "generator_a", "generator_b"):
        if column in not_text:
            continue  # already refused row by row
        for i in np.flatnonzero(_differs_from_first(codes_of(column)[0], pair, first_of_pair)):
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


def _stripped_name(value: object) -> str | None:
    return None if is_missing(value) or isinstance(value, bool) else str(value).strip()


def _repeated(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Rows whose (first, second) codes appeared on an earlier row; -1 (missing) is a value like any
    other, as in ``DataFrame.duplicated``."""
    if first.size == 0:
        return np.zeros(0, dtype=bool)
    mult = int(second.max()) + 2
    # 32-bit keys where they fit: the same keys in half the memory.
    dtype = np.int32 if (int(first.max()) + 2) * mult < 2**31 else np.int64
    key = (first.astype(dtype) + 1) * mult + (second.astype(dtype) + 1)
    out = np.ones(key.size, dtype=bool)
    out[_first_rows(key)] = False
    return out


def _first_rows(key: np.ndarray) -> np.ndarray:
    """The row of each distinct non-negative ``key``'s first occurrence (``np.unique``'s
    ``return_index``): a minimum per key where the keys are small integers (no sort of ten million
    rows), else ``np.unique``."""
    top = int(key.max()) + 1 if key.size else 0
    if top > 4 * key.size + 1024:
        return np.unique(key, return_index=True)[1]
    dtype = np.int32 if key.size < 2**31 - 1 else np.int64  # row numbers: 32 bits hold them
    first = np.full(top, key.size, dtype=dtype)
    np.minimum.at(first, key, np.arange(key.size, dtype=dtype))
    return first[first < key.size]


def _differs_from_first(codes: np.ndarray, pair: np.ndarray, first_of_pair: np.ndarray | None = None
                        ) -> np.ndarray:
    """Rows whose value differs from the first non-missing value of their pair, both given as
    factorize codes (-1: missing). Equal texts are equal codes: exact, and no per-row copy of the
    texts is made. ``first_of_pair``: each pair's first row (``_first_rows(pair)``) where no row
    misses its pair, shared by the columns that miss no value (their first value is that row's)."""
    if first_of_pair is not None and codes.size and codes.min() >= 0:
        first_code = np.full(first_of_pair.size, -1, dtype=np.int64)
        first_code[pair[first_of_pair]] = codes[first_of_pair]
        return codes != first_code[pair]
    ok = (codes >= 0) & (pair >= 0)
    rows = np.flatnonzero(ok)
    first_code = np.full(int(pair.max()) + 1 if pair.size else 0, -1, dtype=np.int64)
    # Rows are in table order, so the first index of each pair among them is its first value.
    first = rows[_first_rows(pair[rows])]
    first_code[pair[first]] = codes[first]
    ref = first_code[np.maximum(pair, 0)]
    return ok & (ref >= 0) & (codes != ref)


def _fold_orders(out: pd.DataFrame, default: str, flag) -> None:
    # No rule given anywhere (no column, or an empty one): every row folds by ``default`` and keeps
    # the rule applied; without the per-row object arrays of a given column (0.4 GB at 10M rows).
    given = None
    if "fold_rule" in out.columns and not out["fold_rule"].isna().all():
        given = map_by_value(out["fold_rule"], lambda v: None if is_missing(v) else str(v).strip().lower())
        for i in np.flatnonzero(~given.isin([*FOLD_RULES, None]).to_numpy()):
            flag(i, "fold_rule", f"{given.iat[i]!r} is not a fold rule ({', '.join(FOLD_RULES)})")
    rules = default if given is None else given.where(given.isin(FOLD_RULES), default).to_numpy(dtype=object)
    folded, applied = _fold_in_blocks(out, rules)  # codes: no object per row
    verdict = verdict_codes(out["verdict"])
    has_fold, has_verdict = applied >= 0, verdict != NO_VERDICT
    for i in np.flatnonzero(has_fold & has_verdict & (verdict != folded)):
        per_order = ", ".join(f"{c}={out[c].iat[i]!r}" for c in (*VERDICT_COLUMNS[1:], *PROB_COLUMNS[1:])
                              if not is_missing(out[c].iat[i]))
        flag(i, "verdict", f"{VERDICT_OF_CODE[verdict[i]]!r} contradicts its orders ({per_order}), which "
                           f"fold to {VERDICT_OF_CODE[folded[i]]!r} under {APPLIED_OF_CODE[applied[i]]!r}")
    fill = has_fold & ~has_verdict
    verdict[fill] = folded[fill]
    out["verdict"] = pd.Series(VERDICT_OF_CODE[verdict], index=out.index, dtype=object)
    rule = APPLIED_OF_CODE[applied]
    kept = rule if given is None else np.where(has_fold, rule, given.to_numpy(dtype=object))
    out["fold_rule"] = pd.Series(kept, index=out.index, dtype=object)


_FOLD_BLOCK = 1_000_000


def _fold_in_blocks(out: pd.DataFrame, rules: str | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``fold_frame_codes`` a block of rows at a time: its temporaries over the whole table were the
    read's peak memory (about 1.5 GB at 10M rows when they were objects)."""
    n = len(out)
    if n <= _FOLD_BLOCK:
        return fold_frame_codes(out, rules)
    columns = out[[c for c in (*VERDICT_COLUMNS[1:], *PROB_COLUMNS[1:]) if c in out.columns]]
    folded, applied = np.empty(n, dtype=np.int8), np.empty(n, dtype=np.int8)
    for lo in range(0, n, _FOLD_BLOCK):
        hi = min(lo + _FOLD_BLOCK, n)
        folded[lo:hi], applied[lo:hi] = fold_frame_codes(columns.iloc[lo:hi], rules if isinstance(rules, str)
                                                          else rules[lo:hi])
    return folded, applied


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
