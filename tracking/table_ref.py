"""Recording the input table of a run in MLflow without duplicating a large file.

A table up to ``JUDGEBIAS_MLFLOW_TABLE_MAX_MB`` (default 50 MB) is copied into the run's artifacts
as before (``table/<name>``). A larger one is recorded by reference: its path, size, row count and
SHA-256 digest (params ``table.sha256``, ``table.bytes``, ``table.rows``; ``table/reference.json``),
plus a sample of its first rows in the same format, cut to stay under the limit
(``table/sample_<name>``). The tag ``judgebias.table_logged`` says which was done (``copy`` or
``reference+sample``), so nobody mistakes the sample for the table. The digest lets a later reader
check that the file at the path is still the one analysed.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from judgebias.runs.store import sha256_file

DEFAULT_MAX_MB = 50.0
MAX_ENV = "JUDGEBIAS_MLFLOW_TABLE_MAX_MB"
TAG = "judgebias.table_logged"
SAMPLE_ROWS = 10_000


def max_copy_bytes() -> int:
    """The size above which a table is referenced instead of copied (``JUDGEBIAS_MLFLOW_TABLE_MAX_MB``)."""
    raw = os.environ.get(MAX_ENV, "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_MAX_MB
    except ValueError:
        raise ValueError(f"{MAX_ENV}={raw!r} is not a number of megabytes") from None
    if mb < 0:
        raise ValueError(f"{MAX_ENV}={raw!r} must be >= 0")
    return int(mb * 2**20)


def _suffix(path: Path) -> str:
    return path.suffix.lower()


def count_rows(path: Path) -> int:
    """Data rows of a table file without loading it: Parquet's footer, else lines (CSV: less the
    header; JSONL: non-blank lines)."""
    if _suffix(path) in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    n = 0
    with path.open("rb") as fh:
        for line in fh:
            n += bool(line.strip())
    return max(0, n - 1) if _suffix(path) == ".csv" else n


def write_sample(path: Path, dest_dir: Path, max_bytes: int, rows: int = SAMPLE_ROWS) -> tuple[Path, int]:
    """The first ``rows`` rows of ``path`` in its own format under ``dest_dir``, halved until the
    file is at most ``max_bytes``; returns (file, rows in it)."""
    dest = dest_dir / f"sample_{path.name}"
    while True:
        n = _write_head(path, dest, rows)
        if dest.stat().st_size <= max_bytes or n == 0:
            return dest, n
        rows //= 2


def _write_head(path: Path, dest: Path, rows: int) -> int:
    if _suffix(path) in (".parquet", ".pq"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        batches = []
        left = rows
        for batch in pf.iter_batches(batch_size=max(1, min(rows, 65536))):
            if left <= 0:
                break
            batches.append(batch.slice(0, left))
            left -= len(batches[-1])
        table = pa.Table.from_batches(batches, schema=pf.schema_arrow)
        pq.write_table(table, dest)
        return table.num_rows
    header = _suffix(path) == ".csv"
    n = 0
    with path.open("rb") as src, dest.open("wb") as out:
        for line in src:
            if header:
                out.write(line)
                header = False
                continue
            if n >= rows:
                break
            if line.strip():
                out.write(line)
                n += 1
    return n


def log_table(path: str | Path, *, max_bytes: int | None = None) -> dict[str, Any]:
    """Record the table file of the ACTIVE run: a copy when small, else a reference and a sample.
    Returns the reference (also logged as ``table/reference.json`` when the table is not copied)."""
    import mlflow

    path = Path(path)
    limit = max_copy_bytes() if max_bytes is None else max_bytes
    size = path.stat().st_size
    ref: dict[str, Any] = {"path": str(path.resolve()), "bytes": size, "rows": count_rows(path),
                           "sha256": sha256_file(path), "max_copy_bytes": limit}
    if size <= limit:
        mlflow.log_artifact(str(path), "table")
        ref["logged"] = "copy"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            sample, n = write_sample(path, Path(tmp), limit)
            mlflow.log_artifact(str(sample), "table")
            ref.update(logged="reference+sample", sample=sample.name, sample_rows=n,
                       sample_rule=f"the first {n} rows of the file")
            (Path(tmp) / "reference.json").write_text(json.dumps(ref, indent=2) + "\n", encoding="utf-8")
            mlflow.log_artifact(str(Path(tmp) / "reference.json"), "table")
    mlflow.log_params({"table.sha256": ref["sha256"], "table.bytes": str(size),
                       "table.rows": str(ref["rows"])})
    mlflow.set_tag(TAG, ref["logged"])
    return ref
