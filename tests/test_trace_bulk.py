"""Traces into a database tracking URI, one INSERT per table and chunk (``judgebias.tracking.trace_bulk``):
the same rows as MLflow's per-trace path in every table, idempotent on rerun, and a refused chunk (a
database error, a table MLflow changed) rolled back whole or never started, and written the public way."""

from __future__ import annotations

import pytest
from test_mlflow_traces import _cli, _figures, small_table

from judgebias.tracking import trace_bulk
from judgebias.tracking.judgment_traces import log_judgment_traces
from judgebias.tracking.trace_import import read_judgment_traces

SELF = {"j2": ["y"]}


@pytest.fixture()
def sqlite_uri(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    yield uri
    mlflow.set_tracking_uri(None)


def _content(experiment: str) -> dict:
    """Each trace of the experiment as what a user sees: tags, metadata, feedback, span in/outputs."""
    import mlflow
    from mlflow import MlflowClient

    exp = mlflow.get_experiment_by_name(experiment)
    traces = MlflowClient().search_traces(locations=[exp.experiment_id], max_results=100)
    out = {}
    for t in traces:
        root = t.data.spans[0]
        out[t.info.tags["judgebias.key"]] = (
            {k: v for k, v in t.info.tags.items() if not k.startswith("mlflow.artifact")},
            {k: v for k, v in t.info.trace_metadata.items() if k != "mlflow.trace.sizeBytes"},
            sorted((a.name, a.source.source_type, a.source.source_id, str(a.value))
                   for a in t.info.assessments),
            root.inputs, root.outputs, t.info.client_request_id,
        )
    return out


def test_one_transaction_per_chunk_writes_what_the_per_trace_path_writes(sqlite_uri, monkeypatch):
    import mlflow

    chunks = []
    real = trace_bulk.write_chunk
    monkeypatch.setattr(trace_bulk, "write_chunk", lambda *a: chunks.append(real(*a)) or chunks[-1])
    table = small_table()
    mlflow.set_experiment("bulk")
    first = log_judgment_traces(table, self_map=SELF)
    assert chunks == [True]  # the database path was taken, in one chunk
    assert (first["logged"], first["missing"]) == (14, 0)
    again = log_judgment_traces(table, self_map=SELF)
    assert (again["logged"], again["skipped"]) == (0, 14)
    mlflow.set_experiment("public")
    assert log_judgment_traces(table, self_map=SELF, bulk=False)["logged"] == 14
    assert chunks == [True]
    bulk, public = _content("bulk"), _content("public")
    assert len(bulk) == 14 and bulk == public
    back, _ = read_judgment_traces("bulk")
    assert len(back) == 14


def _fail_once(engine, statement_start: str, message: str) -> list:
    """Make the first statement on ``engine`` that starts with ``statement_start`` fail in the
    database driver's place (later ones pass); the list records each failure."""
    from sqlalchemy import event

    failed = []

    def before(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith(statement_start) and not failed:
            failed.append(statement)
            raise RuntimeError(message)

    event.listen(engine, "before_cursor_execute", before)
    return failed


def test_a_refused_chunk_is_rolled_back_and_written_the_public_way(sqlite_uri, monkeypatch, caplog):
    import mlflow

    mlflow.set_experiment("fallback")
    # The spans go last: the trace rows, tags, metadata and feedback of the chunk are already
    # inserted in its transaction when this fails.
    failed = _fail_once(trace_bulk.sql_store().engine, "INSERT INTO spans", "disk full")
    counts = log_judgment_traces(small_table(), self_map=SELF)
    assert len(failed) == 1
    assert (counts["logged"], counts["missing"]) == (14, 0)
    assert "one transaction per chunk refused" in caplog.text and "disk full" in caplog.text
    assert len(_content("fallback")) == 14  # nothing twice: the inserted rows were rolled back
    # Each feedback once: 13 judge rows and 23 human labels (the per-trace path's count below).
    assert sum(len(v[2]) for v in _content("fallback").values()) == 36


def test_a_table_mlflow_changed_refuses_the_bulk_path_before_writing(sqlite_uri, monkeypatch, caplog):
    import mlflow

    # As if MLflow had added a column to its assessments table that this module does not fill.
    known = {**trace_bulk.COLUMNS, "assessments": trace_bulk.COLUMNS["assessments"] - {"rationale"}}
    monkeypatch.setattr(trace_bulk, "COLUMNS", known)
    mlflow.set_experiment("changed")
    counts = log_judgment_traces(small_table(), self_map=SELF)
    assert (counts["logged"], counts["missing"]) == (14, 0)
    assert "MLflow's table assessments has columns ['rationale'] not filled here" in caplog.text
    assert len(_content("changed")) == 14


def test_mlflows_trace_rollups_switched_on_send_the_traces_the_stores_way(sqlite_uri, monkeypatch, caplog):
    import mlflow

    # The rollups' rebuild queue is written by the store's own calls only.
    monkeypatch.setenv("MLFLOW_SQL_TRACE_ROLLUPS_ENABLED", "true")
    mlflow.set_experiment("rollups")
    counts = log_judgment_traces(small_table(), self_map=SELF)
    assert (counts["logged"], counts["missing"]) == (14, 0)
    assert "trace rollups are on" in caplog.text
    assert len(_content("rollups")) == 14


def _tables(db) -> dict:
    """Every row of every table of an MLflow database, less the values each write draws afresh
    (ids and clocks of assessments and experiments)."""
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{db}")
    meta = sa.MetaData()
    meta.reflect(engine)
    fresh = {"assessment_id", "created_timestamp", "last_updated_timestamp", "creation_time",
             "last_update_time"}
    out = {}
    with engine.connect() as conn:
        for name, table in meta.tables.items():
            rows = conn.execute(table.select())
            out[name] = sorted(repr(sorted((k, v) for k, v in r._mapping.items() if k not in fresh))
                               for r in rows)
    engine.dispose()
    return out


def _log(kind: str, bulk: bool) -> dict:
    if kind == "pairwise":
        return log_judgment_traces(small_table(), self_map=SELF, bulk=bulk)
    from test_pointwise_traces import small_table as pointwise_table

    from judgebias.tracking.judgment_traces import log_records
    from judgebias.tracking.pointwise_traces import LAYOUT, pointwise_record

    return log_records([pointwise_record(r) for r in pointwise_table().to_dict("records")], LAYOUT, bulk=bulk)


@pytest.mark.parametrize(("kind", "traces", "feedback"), [("pairwise", 14, 36), ("pointwise", 10, 20)])
def test_the_bulk_rows_are_the_rows_mlflows_store_writes_in_every_table(tmp_path, monkeypatch, kind, traces,
                                                                       feedback):
    """The same table logged through the store's start_trace + log_spans and through the bulk
    INSERTs, into two fresh databases at the same clock: every table holds the same rows."""
    import types

    import mlflow

    from judgebias.tracking import judgment_traces

    monkeypatch.chdir(tmp_path)  # the experiments' artifact locations (and so a trace tag) alike
    monkeypatch.setattr(judgment_traces, "time", types.SimpleNamespace(time_ns=lambda: 1_700_000_000 * 10**9))
    chunks = []
    real = trace_bulk.write_chunk
    monkeypatch.setattr(trace_bulk, "write_chunk", lambda *a: chunks.append(real(*a)) or chunks[-1])
    dumps = {}
    try:
        for bulk in (False, True):
            mlflow.set_tracking_uri(f"sqlite:///{tmp_path / f'{bulk}.db'}")
            mlflow.set_experiment("same")
            assert _log(kind, bulk)["logged"] == traces
            dumps[bulk] = _tables(tmp_path / f"{bulk}.db")
    finally:
        mlflow.set_tracking_uri(None)
    assert chunks == [True]
    assert dumps[True] == dumps[False]
    counts = {name: len(rows) for name, rows in dumps[True].items()}
    # One span a trace. Pairwise: 13 judge rows' feedback + 23 human labels; pointwise: as counted
    # by the per-trace path, which wrote the same rows.
    assert (counts["trace_info"], counts["spans"], counts["assessments"]) == (traces, traces, feedback)


def test_judgments_round_trip_through_a_database_uri_written_in_bulk(sqlite_uri, tmp_path, monkeypatch):
    """The server round trip of test_mlflow_traces on a database URI: analyze --traces (the bulk
    path), import mlflow, and analyze of what came back equals analyze of the original."""
    from judgebias.tables.files import read_table, write_table

    chunks = []
    real = trace_bulk.write_chunk
    monkeypatch.setattr(trace_bulk, "write_chunk", lambda *a: chunks.append(real(*a)) or chunks[-1])
    table = small_table()
    src = write_table(table, tmp_path / "small.parquet")
    common = ["--self", "j2=y", "--reps", "200", "--no-report"]
    out = _cli(["analyze", str(src), "--out", str(tmp_path / "a.json"), "--traces", *common],
               sqlite_uri, "db")
    assert "MLflow traces: 14 logged, 0 already there" in out and chunks == [True]
    back = tmp_path / "back.parquet"
    _cli(["import", "mlflow", "--experiment", "db", "--out", str(back)], sqlite_uri, "db")
    assert len(read_table(back)[0]) == 14
    _cli(["analyze", str(back), "--out", str(tmp_path / "b.json"), "--no-mlflow", *common], sqlite_uri, "db")
    ordered = table.sort_values(["pair_id", "judge"], na_position="first", kind="stable")
    write_table(ordered, tmp_path / "ordered.parquet")
    _cli(["analyze", str(tmp_path / "ordered.parquet"), "--out", str(tmp_path / "o.json"), "--no-mlflow",
          *common], sqlite_uri, "db")
    assert _figures(tmp_path / "b.json") == _figures(tmp_path / "o.json")
