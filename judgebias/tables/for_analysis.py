"""A judgment table read for analysis, column-wise: the same validated table ``read_table`` gives, with
texts and names as categoricals (each distinct value once), the human labels as an Arrow list
column and, given ``response_features``, the response texts replaced by their counts, so ten
million judgments fit in a few GB. Parquet is read row group by row group
(``judgebias.tables.parquet_columns``); a large JSONL file through Arrow's JSON reader and a temporary
Parquet file (``judgebias.tables.jsonl_columns``)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from judgebias.tables.columns import hand_back_memory
from judgebias.tables.files import FORMATS, file_format, read_table
from judgebias.tables.pairwise import Exclusions, TableError, reserved_problems, validate
from judgebias.tables.parquet_columns import distinct_categorical, text_categorical, text_stand_in

# A pair's texts repeat on every judge's row of it, and a name on millions of rows: read for analysis,
# these columns are pandas categoricals over Arrow's dictionary (each distinct value stored once), and
# the human labels stay an Arrow list column (no Python list per row).
SHARED_TEXTS = ("prompt", "response_a", "response_b")
CATEGORICAL = (*SHARED_TEXTS, "generator_a", "generator_b", "judge", "verdict", "verdict_ab", "verdict_ba",
               "fold_rule")


RESPONSES = ("response_a", "response_b")


# A JSONL table at least this large is read for analysis through Arrow's JSON reader (a Parquet file in
# between, judgebias.tables.jsonl_columns); a smaller one line by line as ``read_table`` reads it. Measured
# (docs/benchmarks.md): the two take the same time at about 10 MB (10,000 rows), well under a second.
JSONL_COLUMNAR_BYTES = 16 << 20


# A table read for analysis of at least this many rows hands its freed memory back to the system
# (``hand_back_memory``: a full ``gc.collect()``, Arrow's pool, glibc's heap) before and after
# validation. Below it there is little to hand back (0.2 GB per million rows: 20 MB at most), while
# a full collection costs the same whatever the table's size: 0.7-1.1 s each in a process holding
# torch, transformers, pandas and MLflow (324,000 objects; 2 cores at load 7), paid twice by every
# small read (the test suite makes hundreds).
HAND_BACK_ROWS = 100_000


def read_for_analysis(path: str | Path, *, skip_invalid: bool = False,
                      response_features: Callable | None = None,
                      jsonl_columnar_bytes: int | None = None) -> tuple[pd.DataFrame, Exclusions]:
    """``read_table`` as ``analyze`` needs it: the same validated table and values, read column-wise
    from a Parquet file: texts and names as categoricals (one string per distinct value, not one per
    row) and ``human`` as an Arrow list column, so ten million rows fit in a few GB. A JSONL file of
    ``jsonl_columnar_bytes`` (default ``JSONL_COLUMNAR_BYTES``) or more is first streamed into a
    temporary Parquet file by Arrow (deleted after) and read so, where Arrow reads every value as
    ``json`` does (else, and for any problem of parsing, line by line as ``read_table`` reads it:
    the same errors). Other formats: ``read_table``.

    With ``response_features`` (``(column, Arrow text array) -> {column name: one number per text}``,
    e.g. ``judgebias.metrics.frame.response_features``), a Parquet file's ``response_a`` and
    ``response_b`` are not kept: each text is counted once as it is read, the table holds those
    counts instead of the two columns, and validation finds the same problems in the same rows (a
    stand-in of the texts that keeps which are equal, blank or missing)."""
    path = Path(path)
    if not path.exists():
        return read_table(path, skip_invalid=skip_invalid)
    fmt = file_format(path)
    threshold = JSONL_COLUMNAR_BYTES if jsonl_columnar_bytes is None else jsonl_columnar_bytes
    if fmt == "jsonl" and path.stat().st_size >= threshold:
        read = _read_jsonl_columnar(path, response_features)
        if read is not None:
            return _validated(read, path, skip_invalid, response_features)
    if fmt != "parquet":
        return read_table(path, skip_invalid=skip_invalid)
    try:
        import pyarrow.parquet as pq

        # Before reading it all: a column of the file named like our counts would meet them.
        reserved = reserved_problems(pq.read_schema(path).names)
        raw = None if reserved else _read_parquet_columnar(path, response_features)
    except Exception as exc:
        raise TableError(str(path), [f"cannot read as parquet: {exc}"]) from exc
    if reserved:
        raise TableError(str(path), reserved)
    return _validated(raw, path, skip_invalid, response_features)


def _validated(raw: pd.DataFrame, path: Path, skip_invalid: bool, response_features: Callable | None
               ) -> tuple[pd.DataFrame, Exclusions]:
    large = len(raw) >= HAND_BACK_ROWS
    if large:
        hand_back_memory()
    table, exclusions = validate(raw, source=str(path), skip_invalid=skip_invalid,
                                 derived=tuple(raw.attrs.get("derived", ())))
    if response_features is not None:  # the stand-ins are no texts: they never leave this function
        table = table.drop(columns=[c for c in RESPONSES if c in raw.attrs.get("stand_ins", ())])
    del raw
    if large:
        hand_back_memory()
    return table, exclusions


def _jsonl_schema():
    """The Arrow types of the canonical columns as ``json`` gives them once validated: texts, numbers
    (an integer is read as a float: validation makes it one), the human labels a list of texts.
    ``pair_id`` is left out: an id may be a number, kept as one (validation writes it as text)."""
    import pyarrow as pa

    from judgebias.tables.pairwise import CANONICAL, PPL_COLUMNS, PROB_COLUMNS

    def arrow_type(name: str):
        if name in (*PROB_COLUMNS, *PPL_COLUMNS):
            return pa.float64()
        return pa.list_(pa.string()) if name == "human" else pa.string()

    return pa.schema([(c, arrow_type(c)) for c in CANONICAL if c != "pair_id"])


@contextmanager
def _jsonl_as_parquet(path: Path) -> Iterator[Path | None]:
    """A JSONL file as a temporary Parquet file (``judgebias.tables.jsonl_columns``), deleted on leaving; None
    where Arrow cannot read it as ``json`` does (or this pyarrow has no streaming JSON reader)."""
    import tempfile

    import pyarrow as pa
    import pyarrow.json as pj

    from judgebias.tables.jsonl_columns import NotColumnar, jsonl_to_parquet
    from judgebias.tables.pairwise import REQUIRED

    if not hasattr(pj, "open_json"):  # an older pyarrow without the streaming reader: line by line
        yield None
        return
    fd, name = tempfile.mkstemp(prefix="judgebias-", suffix=".parquet")
    os.close(fd)
    tmp = Path(name)
    try:
        try:
            jsonl_to_parquet(path, tmp, _jsonl_schema(), required=REQUIRED[1:], text_or_number=("pair_id",))
            converted = tmp
        except MemoryError:
            raise
        except Exception as exc:  # Arrow's reading not json's, any parse error, a full temp disk: read
            # line by line (its errors name the line), as every JSONL table was read before
            if not isinstance(exc, (NotColumnar, pa.ArrowException, OSError)):
                warnings.warn(f"{path}: read line by line ({type(exc).__name__}: {exc})", stacklevel=4)
            converted = None
        yield converted
    finally:
        tmp.unlink(missing_ok=True)
        pa.default_memory_pool().release_unused()


def _read_jsonl_columnar(path: Path, response_features: Callable | None) -> pd.DataFrame | None:
    """The raw table of a JSONL file through a temporary Parquet file (``_read_parquet_columnar``);
    None where Arrow cannot read it as ``json`` does. Its extra columns come in the order ``json``
    meets them (Arrow's, as every column is met in the first block); a canonical column that no line
    has is there, all missing: validation gives it the values it gives an absent one. A reserved
    column name is left to the line-by-line read to report, as before."""
    import pyarrow.parquet as pq

    from judgebias.tables.jsonl_columns import is_text_list
    from judgebias.tables.pairwise import CANONICAL

    with _jsonl_as_parquet(path) as tmp:
        schema = pq.read_schema(tmp) if tmp is not None else None
        if schema is None or reserved_problems(schema.names):
            return None
        raw = _read_parquet_columnar(tmp, response_features)
    for name in schema.names:  # an extra list of texts: lists, as json gives them (pandas: arrays)
        if name not in CANONICAL and is_text_list(schema.field(name).type):
            raw[name] = pd.Series([v.tolist() if isinstance(v, np.ndarray) else v for v in raw[name]],
                                  index=raw.index, dtype=object)
    return raw


def with_response_texts(table: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """A table ``read_for_analysis`` read without its response texts (from Parquet file ``path``, or
    JSONL file ``path`` through the same temporary Parquet file as it was read), with them back in
    place of the counts that stood for them. Only the first row of each of the
    table's pairs is kept as the file is read row group by row group, so the few rows that traces
    show cost their own texts, not the file's. Validation made every kept row's texts equal to its
    pair's first row in the file (a row that differs is flagged)."""
    derived = [c for c in table.columns if isinstance(c, str) and c.startswith("_jb_")]
    if all(c in table.columns for c in RESPONSES):
        return table.drop(columns=derived)
    path = Path(path)
    if file_format(path) == "jsonl":
        with _jsonl_as_parquet(path) as tmp:
            if tmp is None:  # the file changed since it was read through Arrow
                raise TableError(str(path), ["cannot read its response texts again: the file changed"])
            return _with_texts_of(table, tmp, derived, source=path)
    return _with_texts_of(table, path, derived, source=path)


def _with_texts_of(table: pd.DataFrame, path: Path, derived: list, source: Path) -> pd.DataFrame:
    import pyarrow.parquet as pq

    ids = table["pair_id"].astype(str)
    wanted, texts = set(ids), {}
    parquet_file = pq.ParquetFile(path)
    for group in range(parquet_file.num_row_groups):
        if len(texts) == len(wanted):
            break
        # The ids as validation reads them (pandas' str of the value pandas reads).
        got = parquet_file.read_row_group(group, columns=["pair_id"]).to_pandas()["pair_id"]
        got = got.astype(str).where(got.notna())
        rows = np.flatnonzero(got.isin(wanted - texts.keys()).to_numpy() & ~got.duplicated().to_numpy())
        if rows.size:
            part = parquet_file.read_row_group(group, columns=list(RESPONSES)).take(rows).to_pydict()
            for k, i in enumerate(rows.tolist()):
                texts[got.iat[i]] = (part["response_a"][k], part["response_b"][k])
    missing = wanted - texts.keys()
    if missing:  # the file changed since it was read
        raise TableError(str(source), [f"pair_id {sorted(missing)[0]!r}: not in the file any more"])
    out = table.drop(columns=derived)
    at = list(out.columns).index("prompt") + 1 if "prompt" in out.columns else len(out.columns)
    for offset, column in enumerate(RESPONSES):
        out.insert(at + offset, column, [texts[i][offset] for i in ids])
    return out


def parquet_rows(path: str | Path) -> int:
    """Rows of a Parquet file from its footer (without reading it); -1 for another format or a file
    that cannot be read as Parquet (reading it then says why)."""
    path = Path(path)
    if not path.exists() or FORMATS.get(path.suffix.lower()) != "parquet":
        return -1
    try:
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    except Exception:  # the read that follows reports the problem with the file's name
        return -1


def table_rows(path: str | Path) -> int:
    """Rows of a table file without reading its values: a Parquet file's from its footer, a JSONL
    file's lines (blank ones too: at most a few more than its rows); -1 for a CSV file or one that
    cannot be read (reading it then says why)."""
    path = Path(path)
    if path.exists() and FORMATS.get(path.suffix.lower()) == "jsonl":
        from judgebias.tables.jsonl_columns import jsonl_lines

        try:
            return jsonl_lines(path)
        except OSError:
            return -1
    return parquet_rows(path)


def _is_text(arrow_type) -> bool:
    import pyarrow as pa

    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def _read_parquet_columnar(path: Path, response_features: Callable | None = None) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    coded = [c for c in CATEGORICAL if c in schema.names and _is_text(schema.field(c).type)]
    human = "human" in schema.names and (pa.types.is_list(schema.field("human").type)
                                        or pa.types.is_large_list(schema.field("human").type)) \
        and _is_text(schema.field("human").type.value_type)
    special = {*coded, *(["human"] if human else [])}
    others = [c for c in schema.names if c not in special]
    # Everything else as pandas reads it (ids, numbers, extra columns): values unchanged.
    df = pd.read_parquet(path, columns=others) if others else None
    columns: dict[str, pd.Series | pd.Categorical] = {}
    features: dict[str, pd.Series] = {}
    n_rows = pq.ParquetFile(path).metadata.num_rows
    index = df.index if df is not None else pd.RangeIndex(n_rows)
    texts = [c for c in coded if c in SHARED_TEXTS]
    if texts:
        # Texts row group by row group, each pair's compared with its first
        # (judgebias.tables.parquet_columns).
        group = _pair_groups(df, schema) if df is not None and "pair_id" in df.columns else \
            np.zeros(n_rows, dtype=np.int64)
        parquet_file = pq.ParquetFile(path)
        # Both responses counted, or neither: ``prepare`` derives the counts of the two together
        # (a response column stored another way, e.g. dictionary-typed, keeps both texts).
        counted = response_features is not None and all(c in texts for c in RESPONSES)
        for name in texts:
            if counted and name in RESPONSES:
                stand_in, counts = text_stand_in(parquet_file, name, group,
                                                 lambda values, name=name: response_features(name, values))
                columns[name] = pd.Series(stand_in, index=index)
                features.update({k: pd.Series(v, index=index) for k, v in counts.items()})
            else:
                columns[name] = pd.Series(text_categorical(parquet_file, name, group), index=index)
            # Arrow's allocator keeps the freed row-group buffers for reuse; hand them back.
            pa.default_memory_pool().release_unused()
    for name in coded:
        if name not in texts:
            col = pq.read_table(path, columns=[name], read_dictionary=[name]).column(0)
            columns[name] = pd.Series(dictionary_categorical(col), index=index)
            del col
    if human:
        col = pq.read_table(path, columns=["human"]).column(0)
        columns["human"] = pd.Series(pd.arrays.ArrowExtensionArray(col), index=index)
    frame = pd.concat([df, pd.DataFrame(columns, index=index)], axis=1) if df is not None else \
        pd.DataFrame(columns, index=index)
    pa.default_memory_pool().release_unused()
    frame = frame[[c for c in schema.names if c in frame.columns]]
    if features:  # the counts travel as extra columns, so rows dropped by --skip-invalid drop them too
        frame = pd.concat([frame, pd.DataFrame(features, index=index)], axis=1)
        frame.attrs["stand_ins"] = [c for c in RESPONSES if c in columns and c in texts]
        frame.attrs["derived"] = list(features)
    return frame


def _pair_groups(df: pd.DataFrame, schema) -> np.ndarray:
    """Each row's pair as a non-negative code (missing ids: one code of their own). Text ids are
    hashed here once and kept as a categorical of those codes, so validation and ``prepare`` read
    the codes instead of hashing ten million ids twice more."""
    import pyarrow as pa

    codes, uniques = pd.factorize(df["pair_id"], use_na_sentinel=True)
    if _is_text(schema.field("pair_id").type):
        df["pair_id"] = distinct_categorical(codes.astype(np.int32),
                                             pa.array(uniques, type=pa.large_string()))
    return np.where(codes < 0, len(uniques), codes)


def dictionary_categorical(col) -> pd.Categorical:
    """A pandas categorical from an Arrow dictionary-encoded (chunked) array: its categories are the
    distinct values (Arrow-backed text, stored once), its codes one int32 per row (-1: null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = col.unify_dictionaries() if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col])
    if col.num_chunks == 0 or len(col) == 0:
        return pd.Categorical.from_codes(np.zeros(0, dtype=np.int32), categories=pd.Index([], dtype=object))
    dictionary = col.chunk(0).dictionary
    codes = np.concatenate([c.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
                            for c in col.chunks])
    if len(pc.unique(dictionary)) != len(dictionary) or dictionary.null_count:
        # A categorical's categories are distinct: re-encode a dictionary that repeats a value.
        encoded = pc.dictionary_encode(dictionary)
        remap = np.append(encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False), -1).astype(np.int32)
        codes, dictionary = remap[codes], pc.drop_null(encoded.dictionary)
    return distinct_categorical(codes, dictionary)
