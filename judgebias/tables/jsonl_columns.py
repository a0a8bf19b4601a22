"""A large JSONL judgment table streamed into a Parquet file by Arrow's JSON reader, block by block.

``judgebias.tables.for_analysis.read_for_analysis`` then reads that file column-wise as it reads
any Parquet table:
a Python object per line (``json.loads``, then ``pandas.DataFrame.from_records``) costs about
5 GB and 40 s per million judgments; Arrow parses the same lines in C++ into typed columns.

The conversion is only taken where it gives exactly the values Python's ``json`` would: every case
in which Arrow would read a value otherwise, or could not read the file at all, raises
``NotColumnar`` and the caller reads the file line by line as before (whose errors name the line).
These are: any Arrow parse or type error (a malformed line, a value of another type than its column's
in an earlier row or than the schema given, a key given twice, an invalid escape, a field first met
after the first block, a line longer than a block), a nested value in a column whose type was not
given (Arrow would fill a struct's missing keys; a list of texts is the one kept), and a whole number
beyond 64 bits (Arrow would round it to a float: Python keeps the integer).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# Arrow's reader parses one block of the file at a time (lines never straddle it): a block's columns
# are what is held, so the memory of the conversion does not grow with the file.
BLOCK_BYTES = 16 << 20
ROW_GROUP_ROWS = 100_000  # as the benchmark writes its Parquet tables: each row group read alone later
_INT64_LIMIT = 2.0**63


class NotColumnar(ValueError):
    """The file cannot be read by Arrow exactly as ``json.loads`` reads it (the reason in the message)."""


def _inferred_type_ok(arrow_type) -> bool:
    """Types whose values Arrow reads as ``json`` does: null, bool, integer, float, text, and a list of
    texts (handed back as lists by the caller: ``is_text_list``)."""
    import pyarrow as pa

    return (pa.types.is_null(arrow_type) or pa.types.is_boolean(arrow_type) or pa.types.is_int64(arrow_type)
            or pa.types.is_float64(arrow_type) or pa.types.is_string(arrow_type) or is_text_list(arrow_type))


def is_text_list(arrow_type) -> bool:
    import pyarrow as pa

    return pa.types.is_list(arrow_type) and (pa.types.is_string(arrow_type.value_type)
                                             or pa.types.is_null(arrow_type.value_type))


def _big_integers(column) -> bool:
    """Whether a float column holds a whole number that a 64-bit integer cannot: one written as an
    integer would be a Python int in ``json.loads``'s reading (written ``1e19``, it is a float there too,
    but the two are the same to Arrow: both are sent back to that reading)."""
    import pyarrow.compute as pc

    big = pc.greater_equal(pc.abs(column), _INT64_LIMIT)
    if not pc.any(big).as_py():
        return False
    whole = pc.equal(pc.floor(column), column)
    return bool(pc.any(pc.and_(big, whole)).as_py())


def _write_parquet(reader, dest: Path, known: set, required: tuple, text_or_number: tuple,
                   row_group_rows: int) -> tuple[int, dict[str, int]]:
    """Arrow's batches written to ``dest`` in row groups; (rows, missing values of each ``required``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stream_schema = reader.schema
    for field in stream_schema:
        if field.name in known:
            continue
        if not _inferred_type_ok(field.type) or (field.name in text_or_number
                                                 and pa.types.is_boolean(field.type)):
            raise NotColumnar(f"column {field.name!r} is read by Arrow as {field.type}")
    floats = [f.name for f in stream_schema if f.name not in known and pa.types.is_float64(f.type)]
    nulls = dict.fromkeys(required, 0)
    rows = 0
    pending: list = []
    pending_rows = 0
    writer = pq.ParquetWriter(dest, stream_schema)
    try:
        def flush() -> None:
            nonlocal pending, pending_rows
            if pending:
                writer.write_table(pa.Table.from_batches(pending, schema=stream_schema),
                                   row_group_size=row_group_rows)
            pending, pending_rows = [], 0

        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except pa.ArrowInvalid as exc:
                raise NotColumnar(str(exc)) from exc
            for name in floats:
                if _big_integers(batch.column(name)):
                    raise NotColumnar(f"column {name!r} holds an integer beyond 64 bits")
            for name in nulls:
                nulls[name] += batch.column(name).null_count
            rows += batch.num_rows
            pending.append(batch)
            pending_rows += batch.num_rows
            if pending_rows >= row_group_rows:
                flush()
        flush()
    finally:
        writer.close()
    return rows, nulls


def jsonl_to_parquet(source: Path, dest: Path, schema, *, required: tuple[str, ...] = (),
                     text_or_number: tuple[str, ...] = (), block_bytes: int | None = None,
                     row_group_rows: int | None = None) -> int:
    """Write the JSONL file ``source`` to the Parquet file ``dest``; returns its number of rows.

    ``schema`` (an Arrow schema) gives the types of the columns known in advance; any other field is
    typed from the first block (null, bool, integer, float, text or a list of texts only). A column of
    ``schema`` that no line has is all missing (what ``json.loads`` gives a missing key): a
    ``required`` one that is all missing may instead be absent from every line, which the caller must
    tell apart, so that raises ``NotColumnar``. ``text_or_number``: inferred columns that may be text
    or numbers only (not booleans). Raises ``NotColumnar`` as the module says; ``dest`` is the
    caller's to delete.
    """
    import pyarrow as pa
    import pyarrow.json as pj

    known = set(schema.names)
    block_bytes, row_group_rows = block_bytes or BLOCK_BYTES, row_group_rows or ROW_GROUP_ROWS
    counter = LineCounter()
    with Path(source).open("rb") as fh:
        try:
            reader = pj.open_json(_Counted(fh, counter), read_options=pj.ReadOptions(block_size=block_bytes),
                                  parse_options=pj.ParseOptions(explicit_schema=schema,
                                                                unexpected_field_behavior="infer"))
        except pa.ArrowInvalid as exc:
            raise NotColumnar(str(exc)) from exc
        rows, nulls = _write_parquet(reader, dest, known, required, text_or_number, row_group_rows)
    if rows == 0:
        raise NotColumnar("no rows")
    if rows != counter.result():  # Arrow takes two objects on a line, or one over two lines
        raise NotColumnar("not one JSON object per line")
    empty = [name for name, n in nulls.items() if n == rows]
    if empty:
        raise NotColumnar(f"column(s) {', '.join(empty)} missing on every row (or absent)")
    return rows


_BLANK_BYTES = b" \t\r"
_BLANK_CODES = np.frombuffer(_BLANK_BYTES, dtype=np.uint8)


def _check(data: bytes, start: int = 0, end: int | None = None) -> None:
    """``NotColumnar`` where ``data[start:end]`` holds a CR that ends no line or a byte order mark
    (single-byte searches first: a scan at memory speed where, as usual, there is neither)."""
    end = len(data) if end is None else end
    cr = data.find(b"\r", start, end) >= 0 and \
        data.count(b"\r", start, end) != data.count(b"\r\n", start, end)
    if cr or (data.find(b"\xef", start, end) >= 0 and data.find(b"\xef\xbb\xbf", start, end) >= 0):
        raise NotColumnar("a lone CR or a byte order mark")


def content_lines(path: Path, chunk_bytes: int = 16 << 20) -> int:
    """``LineCounter``'s count of a whole file."""
    counter = LineCounter()
    with Path(path).open("rb") as fh:
        while chunk := fh.read(chunk_bytes):
            counter.feed(chunk)
    return counter.result()


class LineCounter:
    """Counts the lines that are not blank, as Python reads a text file line by line, from the bytes
    of a file fed to it in order (a blank line holds spaces, tabs or a CR at most: another character
    there is one Arrow does not read as blank either). A CR that ends no line (a line break to Python,
    a space to Arrow) or a UTF-8 byte order mark (an error to ``json.loads``, skipped by Arrow) raises
    ``NotColumnar``."""

    def __init__(self) -> None:
        self.lines = 0
        self._blank = 0
        self._pending = b""  # the last line fed so far, not ended yet

    def feed(self, chunk: bytes) -> None:
        first, last = chunk.find(b"\n"), chunk.rfind(b"\n")
        if first < 0:
            self._pending += chunk
            return
        head = self._pending + chunk[:first]  # the line begun in an earlier chunk, one line
        _check(head + b"\n")
        self.lines += 1
        self._blank += not head.strip(_BLANK_BYTES)
        self._pending = chunk[last + 1:]
        if last == first:
            return
        # The lines ended in this chunk, read where they lie (no copy).
        _check(chunk, first + 1, last + 1)
        codes = np.frombuffer(chunk, dtype=np.uint8, count=last + 1)
        ends = first + 1 + np.flatnonzero(codes[first + 1:] == 10)
        starts = np.concatenate([[first + 1], ends[:-1] + 1])
        self.lines += ends.size
        # A line that starts with a byte that is not blank holds something; the empty ones hold
        # nothing, and the few others (indented lines) are looked at one by one.
        empty = starts == ends
        self._blank += int(empty.sum())
        starts, ends = starts[~empty], ends[~empty]
        for k in np.flatnonzero(np.isin(codes[starts], _BLANK_CODES)).tolist():
            self._blank += not chunk[starts[k]: ends[k]].strip(_BLANK_BYTES)

    def result(self) -> int:
        _check(self._pending)
        return self.lines - self._blank + bool(self._pending.strip(_BLANK_BYTES))


class _Counted:
    """A binary file that feeds what is read of it to a ``LineCounter`` (the file is read once)."""

    def __init__(self, fh, counter: LineCounter) -> None:
        self._fh, self._counter = fh, counter
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        data = self._fh.read(size)
        self._counter.feed(data)
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def jsonl_lines(path: Path, chunk_bytes: int = 16 << 20) -> int:
    """Lines of a text file (a last one without its newline included), counted without parsing them:
    a few tenths of a second per GB. Blank lines count too: an upper bound of a JSONL table's rows."""
    lines = 0
    last = b"\n"
    with Path(path).open("rb") as fh:
        while chunk := fh.read(chunk_bytes):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")
