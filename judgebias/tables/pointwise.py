"""The pointwise table: one row per (item, judge[, criterion]), the interchange format of absolute
scores (``judgebias judge --mode pointwise`` writes it, ``judgebias import table`` reads it).

    item_id       str    required, stable id of the (prompt, response) item
    prompt        str    required
    response      str    required
    generator     str    model that wrote the response (empty when unknown)
    judge         str    judge that gave ``score``; empty for human-only rows
    score         float  the judge's score: the expected value of ``score_dist`` where it exists,
                         else the integer parsed from the judge's text (``score_source``)
    score_argmax  float  the most probable score (the parsed one where only that exists)
    score_dist    list   P(score = scale_min + k), k = 0..scale_max - scale_min; empty when parsed
    scale_min     int    required
    scale_max     int    required
    criterion     str    what was scored (a rubric's first line, "overall quality", ...)
    human_scores  list   human ratings of the response on the same scale, one per rater
    reference     str    optional reference answer

Rows are told from a pairwise table (``judgebias.tables.pairwise``) by their columns: ``response`` and no
``response_a``. Any other column is carried through untouched.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from judgebias.tables.columns import is_missing
from judgebias.tables.pairwise import Exclusions, TableError

REQUIRED = ("item_id", "prompt", "response", "scale_min", "scale_max")
TEXT_OPTIONAL = ("generator", "judge", "criterion", "reference")
CANONICAL = (
    *REQUIRED[:3],
    "generator",
    "judge",
    "score",
    "score_argmax",
    "score_dist",
    "scale_min",
    "scale_max",
    "criterion",
    "human_scores",
    "reference",
)
DIST_TOLERANCE = 1e-3


def is_pointwise(columns: Iterable[str] | pd.DataFrame) -> bool:
    """A pointwise table has a ``response`` column and no pair columns."""
    cols = set(columns.columns if isinstance(columns, pd.DataFrame) else columns)
    return "response" in cols and "response_a" not in cols and "response_b" not in cols


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a number") from None
    if math.isinf(x):
        raise ValueError(f"{value!r} is not a finite number")
    return None if math.isnan(x) else x


def as_score_list(value: object, where: str = "") -> list[float]:
    """A list of numbers from a list, an array, a JSON text ("[7, 8]") or a single number; empty
    for a missing value. ValueError names ``where``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: {text[:40]!r} is not a number or a JSON list of numbers") from None
    items = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
    out = []
    for v in items:
        try:
            x = _number(v)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if x is None:
            raise ValueError(f"{where}: a missing value inside the list")
        out.append(x)
    return out


def validate_pointwise(
    df: pd.DataFrame, source: str = "<table>", *, skip_invalid: bool = False
) -> tuple[pd.DataFrame, Exclusions]:
    """Check and normalize a pointwise table. Every problem is named by source, row (1-based, as in
    the file) and field; with ``skip_invalid`` the bad rows are excluded and counted by reason."""
    missing_cols = [c for c in REQUIRED if c not in df.columns]
    if missing_cols:
        raise TableError(
            source, [f"missing required column(s) of a pointwise table: {', '.join(missing_cols)}"]
        )
    out = df.copy().reset_index(drop=True)
    problems: list[str] = []
    bad: dict[int, str] = {}

    def flag(i: int, column: str, message: str) -> None:
        problems.append(f"row {i + 1}, field {column!r}: {message}")
        bad.setdefault(i, f"invalid_{column}")

    for column in (*TEXT_OPTIONAL, "score", "score_argmax", "score_dist", "human_scores"):
        if column not in out.columns:
            out[column] = None
    scores, argmaxes, dists, humans = [], [], [], []
    lows, highs = [], []
    for i, row in enumerate(out.to_dict(orient="records")):
        for column in REQUIRED[:3]:
            if is_missing(row[column]):
                flag(i, column, "is empty")
        lo = hi = None
        try:
            lo, hi = _number(row["scale_min"]), _number(row["scale_max"])
        except ValueError as exc:
            flag(i, "scale_min", str(exc))
        if lo is None or hi is None or lo != int(lo) or hi != int(hi) or lo >= hi:
            flag(
                i,
                "scale_max",
                f"the scale must be two integers scale_min < scale_max, got "
                f"{row['scale_min']!r}..{row['scale_max']!r}",
            )
            lo = hi = None
        lows.append(lo)
        highs.append(hi)
        values = {}
        for column in ("score", "score_argmax"):
            try:
                x = None if is_missing(row[column]) else _number(row[column])
            except ValueError as exc:
                flag(i, column, str(exc))
                x = None
            if x is not None and lo is not None and not lo <= x <= hi:
                flag(i, column, f"{x:g} is outside the scale {lo:g}..{hi:g}")
            values[column] = math.nan if x is None else x
        if not math.isnan(values["score"]) and is_missing(row["judge"]):
            flag(i, "judge", "is empty but the row has a score (whose score is it?)")
        scores.append(values["score"])
        argmaxes.append(values["score_argmax"])
        try:
            dist = as_score_list(row["score_dist"], "score_dist")
        except ValueError as exc:
            flag(i, "score_dist", str(exc).removeprefix("score_dist: "))
            dist = []
        if dist and lo is not None:
            if len(dist) != int(hi - lo) + 1:
                flag(
                    i,
                    "score_dist",
                    f"{len(dist)} probabilities for the {int(hi - lo) + 1} scores {lo:g}..{hi:g}",
                )
            elif min(dist) < 0 or abs(sum(dist) - 1.0) > DIST_TOLERANCE:
                flag(i, "score_dist", f"not a distribution (sum {sum(dist):.4f}, min {min(dist):.4f})")
        dists.append(dist or None)
        try:
            human = as_score_list(row["human_scores"], "human_scores")
        except ValueError as exc:
            flag(i, "human_scores", str(exc).removeprefix("human_scores: "))
            human = []
        outside = [h for h in human if lo is not None and not lo <= h <= hi]
        if outside:
            flag(i, "human_scores", f"{outside[0]:g} is outside the scale {lo:g}..{hi:g}")
        humans.append(human)
    out["score"], out["score_argmax"] = scores, argmaxes
    out["score_dist"], out["human_scores"] = dists, humans
    out["scale_min"] = pd.array([None if v is None else int(v) for v in lows], dtype="Int64")
    out["scale_max"] = pd.array([None if v is None else int(v) for v in highs], dtype="Int64")
    for column in TEXT_OPTIONAL:
        out[column] = out[column].map(lambda v: "" if is_missing(v) else str(v))
    _flag_duplicates(out, flag)
    exclusions = Exclusions()
    if problems and not skip_invalid:
        raise TableError(source, problems)
    if bad:
        for i, reason in sorted(bad.items()):
            exclusions.add(reason, example=f"row {i + 1}")
        out = out.drop(index=sorted(bad)).reset_index(drop=True)
    ordered = [c for c in CANONICAL if c in out.columns]
    return out[ordered + [c for c in out.columns if c not in ordered]], exclusions


def _flag_duplicates(out: pd.DataFrame, flag) -> None:
    keys = out[["item_id", "judge", "criterion"]].astype(str)
    dup = keys.duplicated(keep="first").to_numpy()
    for i in np.flatnonzero(dup):
        flag(
            int(i),
            "item_id",
            f"{out.at[i, 'item_id']!r} appears twice for judge {out.at[i, 'judge']!r} "
            f"and criterion {out.at[i, 'criterion']!r}",
        )


def human_mean(df: pd.DataFrame) -> np.ndarray:
    """Mean of each row's human scores (NaN where a row has none)."""
    return np.array([float(np.mean(h)) if h is not None and len(h) else math.nan for h in df["human_scores"]])


def file_is_pointwise(path) -> bool:
    """Whether a table file has the pointwise shape, from its header only (a parquet schema, a CSV
    header, the first JSONL object); False for anything unreadable, which the pairwise reader then
    reports with its own errors."""
    from pathlib import Path

    path = Path(path)
    try:
        suffix = path.suffix.lower()
        if suffix in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            return is_pointwise(pq.read_schema(path).names)
        if suffix == ".csv":
            return is_pointwise(pd.read_csv(path, nrows=0).columns)
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    obj = json.loads(line)
                    return isinstance(obj, dict) and is_pointwise(obj.keys())
    except (OSError, ValueError, ImportError):
        return False
    return False


UNSCORED_TOP = 10


def unscored_reasons(table: pd.DataFrame) -> dict[str, int]:
    """Why the judge rows without a score have none: their ``judge_error`` texts (the importer's or
    the judging engine's reason) counted, most frequent first; the first ``UNSCORED_TOP`` reasons, the
    rest counted together. Human-only rows (no judge) are not judgments and are not counted."""
    judged = table["judge"].map(lambda j: not is_missing(j)) if "judge" in table.columns else \
        pd.Series(False, index=table.index)
    score = pd.to_numeric(table["score"], errors="coerce") if "score" in table.columns else \
        pd.Series(np.nan, index=table.index)
    unscored = judged.to_numpy(dtype=bool) & ~np.isfinite(score.to_numpy(dtype=float))
    if "judge_error" in table.columns:
        why = table.loc[unscored, "judge_error"].map(
            lambda e: "no score and no judge_error given" if is_missing(e) else str(e).strip())
    else:
        why = pd.Series("no score and no judge_error given", index=table.index[unscored])
    counts = why.value_counts()
    out = {str(k): int(v) for k, v in counts.iloc[:UNSCORED_TOP].items()}
    if len(counts) > UNSCORED_TOP:
        out[f"{len(counts) - UNSCORED_TOP} other reasons"] = int(counts.iloc[UNSCORED_TOP:].sum())
    return out
