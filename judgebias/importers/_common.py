"""Helpers shared by the importers: strict file reading, field access that names file/row/field,
and the final hand-over to the judgment-table contract.

Conventions every importer follows:

* A record that cannot become a valid pair (empty or non-text response, no prompt, ...) is left
  out and counted in the returned ``Exclusions`` under a reason that says why.
* A judge row kept without a usable verdict (the judge answered garbage, one order is missing) is
  counted under a reason starting with ``verdict_``: the pair stays, the metrics count the row
  under ``judge_missing``.
* A value that is kept but had to be re-spelled (a tie written ``0`` or ``Tie``) is counted under a
  reason starting with ``recoded:``; such rows are NOT left out. ``split_counts`` separates the three.
* Anything that means the input is not what the importer was written for (malformed JSON, a
  missing field, a verdict file that does not line up with its test set) raises ``TableError``
  naming the file, the row and the field: never a silent guess.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from judgebias.tables.labels import normalize_label
from judgebias.tables.pairwise import Exclusions, TableError, validate

RECODED = "recoded:"
NO_VERDICT = "verdict_"


def load_json(path: Path) -> Any:
    """Parse a JSON file; errors name the file and the position."""
    if not path.is_file():
        raise TableError(str(path), ["file does not exist"])
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise TableError(str(path), [f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"]
                         ) from exc
    except UnicodeDecodeError as exc:
        raise TableError(str(path), [f"not UTF-8 text: {exc}"]) from exc


def load_records(path: Path) -> list[dict]:
    """A JSON file holding a list of objects (the layout of every JSON dataset imported here)."""
    data = load_json(path)
    if not isinstance(data, list):
        raise TableError(str(path), [f"expected a JSON list of records, got {type(data).__name__}"])
    for i, rec in enumerate(data, 1):
        if not isinstance(rec, dict):
            raise TableError(str(path), [f"row {i}: expected a JSON object, got {type(rec).__name__}"])
    return data


def get(rec: dict, name: str, path: Path | str, row: int) -> Any:
    """``rec[name]``, or a TableError naming file, row (1-based) and field."""
    try:
        return rec[name]
    except KeyError:
        raise TableError(str(path), [f"row {row}: missing field {name!r}"]) from None


def label(value: Any, path: Path | str, row: int, name: str) -> str | None:
    """A human/judge label as "a" | "b" | "tie" (None when empty); unknown spellings raise."""
    try:
        return normalize_label(value)
    except ValueError as exc:
        raise TableError(str(path), [f"row {row}, field {name!r}: {exc}"]) from None


def text_problem(value: Any) -> str | None:
    """Why a value cannot serve as a prompt/response, as an exclusion reason; None when it can."""
    if isinstance(value, bool):
        return "boolean"
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "missing"
    if not isinstance(value, str):
        return "not_text"
    if not value.strip():
        return "empty"
    return None


def short_hash(*parts: str, n: int = 12) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:n]


def split_counts(exclusions: Exclusions) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """(left out, kept without a verdict, recoded-but-kept) counts from one importer's
    ``Exclusions``: an import summary that added the three would claim rows it kept as lost."""
    dropped, no_verdict, recoded = {}, {}, {}
    for reason, n in sorted(exclusions.counts.items()):
        if reason.startswith(RECODED):
            recoded[reason[len(RECODED):]] = int(n)
        elif reason.startswith(NO_VERDICT):
            no_verdict[reason] = int(n)
        else:
            dropped[reason] = int(n)
    return dropped, no_verdict, recoded


def finish(rows: list[dict], source: str, exclusions: Exclusions) -> tuple[pd.DataFrame, Exclusions]:
    """Build the table and hold it to the contract. Importers drop bad records themselves, so a
    validation failure here is an importer bug and is raised, not skipped."""
    if not rows:
        if not exclusions.total:
            raise TableError(source, ["the file holds no records: it is empty"])
        raise TableError(source, ["no usable rows (every record was excluded: " + str(exclusions) + ")"])
    df = pd.DataFrame.from_records(rows)
    table, _ = validate(df, source=source)
    return table, exclusions
