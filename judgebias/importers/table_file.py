"""A judgment table in any file (``judgebias import table FILE``): CSV, JSONL or Parquet with the
columns of ``judgebias.tables.pairwise`` (required: pair_id, prompt, response_a, response_b), or a pointwise
table (``judgebias.tables.pointwise``: a ``response`` column and no pair columns), told by its columns.

Label values are case-normalised and known spellings mapped ("Tie (bothbad)", "model_a", "1"; see
``judgebias.tables.labels``); every re-spelled value is counted under ``recoded:<column>_spelled_<value>``
so a user sees what was read as what. A row with both orders gets its verdict folded by the
table's rule (``judgebias.tables.folding``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from judgebias.importers._common import RECODED
from judgebias.tables.files import read_raw
from judgebias.tables.labels import label_parts, normalize_label
from judgebias.tables.pairwise import Exclusions, TableError, validate
from judgebias.tables.pointwise import is_pointwise, validate_pointwise

LABEL_COLUMNS = ("verdict", "verdict_ab", "verdict_ba", "human")


def _spellings(values: pd.Series) -> Counter:
    """Label spellings that are not already canonical, with their counts (unknown ones are left to
    the validator, which names their rows)."""
    seen: Counter = Counter()
    for value in values.dropna():
        for item in label_parts(value):
            if isinstance(item, str) and item not in ("a", "b", "tie"):
                try:
                    if normalize_label(item) is not None:
                        seen[item] += 1
                except ValueError:
                    pass
    return seen


def _blank_text(path: Path) -> bool:
    """A CSV/JSONL file with nothing but whitespace (pandas says "No columns to parse")."""
    if not path.is_file() or path.suffix.lower() not in (".csv", ".jsonl"):
        return False
    with path.open("rb") as f:
        return not f.read(1 << 16).strip() and path.stat().st_size < (1 << 16)


def import_table(src: Path, **_: object) -> tuple[pd.DataFrame, Exclusions]:
    path = Path(src)
    raw = pd.DataFrame() if _blank_text(path) else read_raw(path)
    if raw.empty:
        raise TableError(str(src), ["the file holds no rows: it is empty (expected a header and rows "
                                    "with pair_id, prompt, response_a, response_b; see docs/importers.md)"])
    if is_pointwise(raw):
        return validate_pointwise(raw, source=str(src))
    exclusions = Exclusions()
    for column in LABEL_COLUMNS:
        if column in raw.columns:
            for spelling, n in sorted(_spellings(raw[column]).items()):
                exclusions.add(f"{RECODED}{column}_spelled_{spelling}", n)
    table, _ = validate(raw, source=str(src))
    return table, exclusions
