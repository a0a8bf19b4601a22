"""The judgment table: one row per (pair, judge), the interchange format of the whole project.

Columns (see README "The judgment table" for the full contract):

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
    human         list  human labels, each "a" | "b" | "tie" (several annotators allowed)
    ppl_a, ppl_b  float the judge's perplexity of each response given the prompt

Any other column is carried through untouched.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

REQUIRED = ("pair_id", "prompt", "response_a", "response_b")
TEXT_OPTIONAL = ("generator_a", "generator_b", "judge")
PROB_COLUMNS = ("p_a", "p_a_ab", "p_a_ba")
PPL_COLUMNS = ("ppl_a", "ppl_b")
LABELS = ("a", "b", "tie")
VERDICT_COLUMNS = ("verdict", "verdict_ab", "verdict_ba")
CANONICAL = (*REQUIRED, *TEXT_OPTIONAL, *PROB_COLUMNS, *VERDICT_COLUMNS, "human", *PPL_COLUMNS)

# Spellings met in real data files; everything else is an error, never a guess.
_LABEL_ALIASES = {
    "a": "a", "b": "b", "tie": "tie",
    "model_a": "a", "model_b": "b", "1": "a", "2": "b", "0": "tie",
    "response_a": "a", "response_b": "b", "[[a]]": "a", "[[b]]": "b", "[[c]]": "tie",
    "draw": "tie", "tie (bothbad)": "tie", "tie_bothbad": "tie", "tie (both bad)": "tie",
}

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


@dataclass
class Exclusions:
    """Rows (or pairs) left out of a computation, counted by reason so nothing vanishes silently."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, n: int = 1, example: str | None = None) -> None:
        if n <= 0:
            return
        self.counts[reason] += n
        if example is not None:
            bucket = self.examples.setdefault(reason, [])
            if len(bucket) < 5:
                bucket.append(example)

    def add_mask(self, reason: str, mask: pd.Series, ids: pd.Series | None = None) -> None:
        n = int(mask.sum())
        if n:
            self.counts[reason] += n
            if ids is not None:
                bucket = self.examples.setdefault(reason, [])
                bucket.extend(str(x) for x in ids[mask].head(5 - len(bucket)))

    def merge(self, other: Exclusions) -> Exclusions:
        for reason, n in other.counts.items():
            self.counts[reason] += n
        for reason, ex in other.examples.items():
            bucket = self.examples.setdefault(reason, [])
            bucket.extend(ex[: max(0, 5 - len(bucket))])
        return self

    @property
    def total(self) -> int:
        return int(sum(self.counts.values()))

    def to_dict(self) -> dict[str, int]:
        return {k: int(v) for k, v in sorted(self.counts.items())}

    def __str__(self) -> str:
        if not self.counts:
            return "no exclusions"
        return ", ".join(f"{k}: {v}" for k, v in sorted(self.counts.items()))


def normalize_label(value: object) -> str | None:
    """Map one label spelling to "a" | "b" | "tie"; None for empty. Raises ValueError when unknown."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"boolean {value!r} is not a label")
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            value = int(value)
    text = str(value).strip().lower()
    if text in ("", "nan", "none", "null"):
        return None
    try:
        return _LABEL_ALIASES[text]
    except KeyError:
        raise ValueError(f"unknown label {value!r} (expected a, b or tie)") from None


def _as_label_list(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        # CSV cannot hold a list column: accept "a|b|tie" and JSON-ish "['a', 'b']".
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1].replace("'", "").replace('"', "")
            parts = [p for p in (s.strip() for s in text.split(",")) if p]
        elif "|" in text:
            parts = [p.strip() for p in text.split("|") if p.strip()]
        else:
            parts = [text] if text else []
        labels = [normalize_label(p) for p in parts]
    elif isinstance(value, (list, tuple, np.ndarray)):
        labels = [normalize_label(v) for v in value]
    else:
        labels = [normalize_label(value)]
    return [x for x in labels if x is not None]


def majority(labels: Iterable[str]) -> str | None:
    """Strict majority of the labels (more than half); None when there is none."""
    labels = list(labels)
    if not labels:
        return None
    (top, n), *_ = Counter(labels).most_common(1)
    return top if n * 2 > len(labels) else None


def plurality(labels: Iterable[str]) -> str | None:
    """Most frequent label, None on a tie for first place or no labels."""
    counts = Counter(labels).most_common()
    if not counts:
        return None
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return None
    return counts[0][0]


def _is_missing(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and value.strip() == ""


def validate(df: pd.DataFrame, source: str = "<table>", *, skip_invalid: bool = False
             ) -> tuple[pd.DataFrame, Exclusions]:
    """Check and normalize a judgment table.

    Every problem is named by source, row (1-based, as in the file) and field. With
    ``skip_invalid`` the offending rows are excluded and counted by reason instead of raising.
    Returns the normalized table (canonical columns first, extras after) and the exclusions.
    """
    problems: list[str] = []
    bad_rows: dict[int, str] = {}
    missing_cols = [c for c in REQUIRED if c not in df.columns]
    if missing_cols:
        raise TableError(source, [f"missing required column(s): {', '.join(missing_cols)}"])

    out = df.copy().reset_index(drop=True)
    row_no = np.arange(1, len(out) + 1)

    def flag(i: int, column: str, message: str) -> None:
        problems.append(f"row {row_no[i]}, field {column!r}: {message}")
        bad_rows.setdefault(i, f"invalid_{column}")

    for column in REQUIRED:
        values = out[column]
        for i in np.flatnonzero(values.map(_is_missing).to_numpy()):
            flag(i, column, "is empty")
        for i in np.flatnonzero(values.map(lambda v: isinstance(v, bool)).to_numpy()):
            flag(i, column, f"boolean {values.iat[i]!r} where text is expected")
    out["pair_id"] = out["pair_id"].astype(str)

    for column in TEXT_OPTIONAL:
        if column not in out.columns:
            out[column] = None
        col = out[column]
        for i in np.flatnonzero(col.map(lambda v: isinstance(v, bool)).to_numpy()):
            flag(i, column, f"boolean {col.iat[i]!r} where a name is expected")
        cleaned = col.map(lambda v: None if _is_missing(v) or isinstance(v, bool) else str(v).strip())
        # object dtype keeps None as None (pandas 3 would turn a str column's None into NaN).
        out[column] = pd.Series(cleaned.tolist(), index=out.index, dtype=object)

    for column in (*PROB_COLUMNS, *PPL_COLUMNS):
        if column not in out.columns:
            out[column] = np.nan
            continue
        raw = out[column]
        numeric = pd.to_numeric(raw.map(lambda v: np.nan if isinstance(v, bool) else v), errors="coerce")
        not_number = numeric.isna() & ~raw.map(_is_missing)
        for i in np.flatnonzero(not_number.to_numpy()):
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
        parsed = []
        for i, value in enumerate(out[column].tolist()):
            try:
                labels = _as_label_list(value)
            except ValueError as exc:
                flag(i, column, str(exc))
                labels = []
            if not as_list and len(labels) > 1:
                flag(i, column, f"one verdict expected, got {value!r}")
                labels = labels[:1]
            parsed.append(labels if as_list else (labels[0] if labels else None))
        out[column] = pd.Series(parsed, index=out.index, dtype=object)

    dup = out.duplicated(subset=["pair_id", "judge"], keep="first")
    for i in np.flatnonzero(dup.to_numpy()):
        key = (out["pair_id"].iat[i], out["judge"].iat[i])
        flag(i, "pair_id", f"duplicate (pair_id, judge) = {key!r}")

    exclusions = Exclusions()
    if problems:
        if not skip_invalid:
            raise TableError(source, problems)
        for i, reason in bad_rows.items():
            exclusions.add(reason, example=f"row {row_no[i]}")
        out = out.drop(index=list(bad_rows)).reset_index(drop=True)

    extras = [c for c in out.columns if c not in CANONICAL]
    return out[list(CANONICAL) + extras], exclusions


def judge_choice(df: pd.DataFrame) -> pd.Series:
    """The judge's hard choice per row: from p_a when present (> 0.5 is A), else the verdict.

    Vectorized; returns "a" | "b" | "tie" or None.
    """
    p = df["p_a"].to_numpy(dtype=float)
    from_p = np.where(p > 0.5, "a", np.where(p < 0.5, "b", "tie")).astype(object)
    verdict = df["verdict"].to_numpy(dtype=object)
    return pd.Series(np.where(np.isnan(p), verdict, from_p), index=df.index, dtype=object)


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
