"""Judgment table files: JSONL, Parquet and CSV read and validated (``read_table``), written atomically
(``write_table``). Reading a large table for analysis, column-wise: ``judgebias.tables.for_analysis``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from judgebias.runs.diskfull import naming_full_disk
from judgebias.tables.pairwise import Exclusions, TableError, validate

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


def file_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise TableError(str(path), [f"unknown file type {path.suffix!r}; use .jsonl, .parquet or .csv"])
    return fmt


def iter_jsonl(path: str | Path, problems: list[str] | None = None) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSONL file.

    A line that is not a JSON object raises ``ValueError`` naming ``file:line``; when a
    ``problems`` list is given, its message is appended there instead and reading goes on (to
    report every bad line at once).
    """
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                problem = (None if isinstance(obj, dict)
                           else f"expected a JSON object, got {type(obj).__name__}")
            except json.JSONDecodeError as exc:
                problem = f"not valid JSON ({exc.msg} at column {exc.colno})"
            if problem is None:
                yield line_no, obj
            elif problems is None:
                raise ValueError(f"{path}:{line_no}: {problem}")
            else:
                problems.append(f"row {line_no}: {problem}")


def _read_jsonl(path: Path) -> pd.DataFrame:
    problems: list[str] = []
    rows = [obj for _, obj in iter_jsonl(path, problems)]
    if problems:
        raise TableError(str(path), problems)
    return pd.DataFrame.from_records(rows)


def read_raw(path: str | Path) -> pd.DataFrame:
    """Read a table file without validating it (errors name the file)."""
    path = Path(path)
    if not path.exists():
        raise TableError(str(path), ["file does not exist"])
    fmt = file_format(path)
    try:
        if fmt == "jsonl":
            return _read_jsonl(path)
        if fmt == "parquet":
            return pd.read_parquet(path)
        return pd.read_csv(path, dtype={"pair_id": str}, keep_default_na=True)
    except TableError:
        raise
    except Exception as exc:  # pyarrow / csv parser errors carry no file name of their own
        raise TableError(str(path), [f"cannot read as {fmt}: {exc}"]) from exc


def read_table(path: str | Path, *, skip_invalid: bool = False) -> tuple[pd.DataFrame, Exclusions]:
    """Read and validate a judgment table; returns (table, exclusions)."""
    return validate(read_raw(path), source=str(path), skip_invalid=skip_invalid)


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, float)):
        return None if np.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def write_table(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a table as JSONL or Parquet (by suffix); written to a temp file then moved, so a
    killed process never leaves half a file behind."""
    path = Path(path)
    fmt = file_format(path)
    if fmt == "csv":
        raise TableError(str(path), ["CSV is accepted on input only (it cannot hold the list column "
                                     "'human'); write .jsonl or .parquet"])
    with naming_full_disk(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        try:
            if fmt == "parquet":
                df.to_parquet(tmp, index=False)
            else:
                with tmp.open("w", encoding="utf-8") as fh:
                    for rec in df.to_dict(orient="records"):
                        fh.write(json.dumps({k: _jsonable(v) for k, v in rec.items()}, ensure_ascii=False)
                                 + "\n")
            tmp.replace(path)
        except BaseException:  # a half file on a full disk holds the space the user must free
            tmp.unlink(missing_ok=True)
            raise
    return path


USAGE_SUFFIX = ".usage.json"


def usage_path(table: str | Path) -> Path:
    """Where a judgment table's judging record lives: ``<table>.usage.json`` beside it (a JSONL
    table has no metadata of its own, and both formats keep it the same way)."""
    table = Path(table)
    return table.with_name(table.name + USAGE_SUFFIX)


def read_usage(table: str | Path) -> dict:
    """The judging record of ``table`` (``{"judges": {judge: {...}}}``), empty when there is none;
    a record that is not such JSON is an error naming the file."""
    path = usage_path(table)
    if not path.exists():
        return {"judges": {}}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a judging record ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("judges"), dict):
        raise ValueError(f"{path}: not a judging record (no 'judges' mapping)")
    return doc


def write_usage(table: str | Path, judges: dict) -> Path:
    """Write (or update) the judging record of ``table``: ``judges`` replace their own entries, the
    others are kept. Written to a temp file then moved."""
    path = usage_path(table)
    doc = read_usage(table)
    doc["judges"].update(_finite(judges))
    with naming_full_disk(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2, allow_nan=False, default=_jsonable) + "\n", encoding="utf-8")
        tmp.replace(path)
    return path


def _finite(value):
    """NaN and infinities as None (JSON has neither), through nested mappings and lists."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    return value
