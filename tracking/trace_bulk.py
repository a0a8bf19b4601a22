"""Trace writes into a database tracking URI (``sqlite:///mlflow.db``, the default of ``judgebias run``
and ``analyze``): one multi-row INSERT per MLflow table and chunk instead of two transactions per trace.

MLflow's SQLAlchemy store writes a trace in ``start_trace`` (its own session, a second one for
``get_experiment``, the ORM's flush of about eleven rows one statement at a time) and its spans in
``log_spans``: 16 traces/s on the shared 2-core machine (docs/benchmarks.md). Here the same rows go
into the same tables through SQLAlchemy Core: per chunk of traces one transaction with one
executemany INSERT for each of ``trace_info``, ``trace_tags``, ``trace_request_metadata``,
``assessments`` and ``spans``.

The rows are what the store's ``start_trace`` followed by ``log_spans`` leaves in the database for
these traces (a single root span, no token usage, cost or session), built with MLflow's own
schema objects (its ORM models' ``__table__``), its assessment row conversion
(``SqlAssessments.from_mlflow_entity``) and span serialisation; tests/test_trace_bulk.py compares
every row of every table against the store's own path. Guards, each falling back to the store's
public path for the chunk (the writer then searches the experiment for every trace either way):

* a table whose columns are not exactly the ones filled here (MLflow changed its schema): refused,
  with the columns named, before anything is written;
* MLflow's opt-in trace rollups switched on (``MLFLOW_SQL_TRACE_ROLLUPS_ENABLED``): their rebuild
  queue is not written here;
* an experiment that is not active, and any database error (a trace id already there, a foreign
  key): the chunk's transaction is rolled back whole.
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger(__name__)

# The columns filled here, per table (computed columns left out: the database fills them). A table
# of MLflow's with any other set refuses the bulk path, naming the difference.
COLUMNS = {
    "trace_info": {"request_id", "experiment_id", "timestamp_ms", "execution_time_ms", "status",
                   "client_request_id", "request_preview", "response_preview", "db_payload_generation",
                   "trace_name", "session_id", "input_tokens", "output_tokens", "total_tokens",
                   "cache_read_input_tokens", "cache_creation_input_tokens",
                   "cache_creation_input_tokens_above_1hr", "input_cost", "output_cost", "total_cost"},
    "trace_tags": {"key", "value", "request_id"},
    "trace_request_metadata": {"key", "value", "request_id"},
    "assessments": {"assessment_id", "trace_id", "name", "assessment_type", "value", "error",
                    "created_timestamp", "last_updated_timestamp", "experiment_id", "trace_timestamp_ms",
                    "aggregate_value", "is_numeric_value", "source_type", "source_id", "run_id", "span_id",
                    "rationale", "overrides", "valid", "assessment_metadata"},
    "spans": {"trace_id", "experiment_id", "span_id", "parent_span_id", "name", "type", "status",
              "start_time_unix_nano", "end_time_unix_nano", "content", "input_cost", "output_cost",
              "total_cost", "model_name", "model_provider"},
}


class SchemaChanged(RuntimeError):
    """MLflow's tables are not the ones this module was checked against."""


def sql_store() -> Any | None:
    """The active tracking store when it is MLflow's SQLAlchemy store, else None (a tracking server:
    its REST API writes one trace per request whatever the client does)."""
    from mlflow.tracking._tracking_service.utils import _get_store

    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    except ImportError:  # MLflow without its database extra
        return None
    store = _get_store()
    return store if isinstance(store, SqlAlchemyStore) and hasattr(store, "engine") else None


def _tables() -> dict[str, Any]:
    from mlflow.store.tracking.dbmodels.models import (
        SqlAssessments,
        SqlSpan,
        SqlTraceInfo,
        SqlTraceMetadata,
        SqlTraceTag,
    )

    tables = {m.__table__.name: m.__table__
              for m in (SqlTraceInfo, SqlTraceTag, SqlTraceMetadata, SqlAssessments, SqlSpan)}
    for name, table in tables.items():
        have = {c.name for c in table.columns if c.computed is None}
        if name not in COLUMNS or have != COLUMNS[name]:
            known = COLUMNS.get(name, set())
            raise SchemaChanged(f"MLflow's table {name} has columns {sorted(have - known)} not filled here "
                                f"and lacks {sorted(known - have)}")
    if set(tables) != set(COLUMNS):
        raise SchemaChanged(f"MLflow's trace tables are {sorted(tables)}, not {sorted(COLUMNS)}")
    return tables


def _assessment_row(assessment: Any, trace_id: str, experiment_id: int, request_time: int) -> dict[str, Any]:
    """MLflow's own conversion of an assessment to its row (value and error as JSON, the numeric
    aggregate, a fresh id and timestamps), read off the ORM object column by column."""
    from mlflow.store.tracking.dbmodels.models import SqlAssessments
    from sqlalchemy import inspect

    obj = SqlAssessments.from_mlflow_entity(assessment)
    obj.trace_id, obj.experiment_id, obj.trace_timestamp_ms = trace_id, experiment_id, request_time
    return {col.name: getattr(obj, attr.key) for attr in inspect(SqlAssessments).column_attrs
            for col in attr.columns}


def _span_row(span: Any, experiment_id: int, ensure_ascii: bool) -> dict[str, Any]:
    """The span's row as the store's ``log_spans`` writes it for a span without cost or model."""
    from mlflow.tracing.otel.translation import translate_span_when_storing
    from mlflow.tracing.utils import TraceJSONEncoder

    content = json.dumps(translate_span_when_storing(span), cls=TraceJSONEncoder, ensure_ascii=ensure_ascii)
    return {"trace_id": span.trace_id, "experiment_id": experiment_id, "span_id": span.span_id,
            "parent_span_id": span.parent_id, "name": span.name, "type": span.span_type,
            "status": span.status.status_code, "start_time_unix_nano": span.start_time_ns,
            "end_time_unix_nano": span.end_time_ns, "content": content, "input_cost": None,
            "output_cost": None, "total_cost": None, "model_name": None, "model_provider": None}


def chunk_rows(store: Any, experiment: Any, built: list[tuple[Any, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per table, the rows of (TraceInfo, root span) pairs: what ``start_trace`` then ``log_spans``
    leave in the database for them."""
    from mlflow.store.db.db_types import MSSQL
    from mlflow.store.tracking.utils.trace_analytics import PROMOTED_TRACE_METADATA_KEYS, validate_trace_name
    from mlflow.tracing.constant import SpansLocation, TraceMetadataKey, TraceTagKey

    experiment_id = int(experiment.experiment_id)
    ensure_ascii = store.db_type == MSSQL  # as log_spans: its content column is not Unicode
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in COLUMNS}
    for info, span in built:
        if span.parent_id is not None or span.trace_id != info.trace_id:
            raise ValueError(f"trace {info.trace_id}: one root span of the same trace expected")
        metadata = {k: v for k, v in info.trace_metadata.items() if k not in PROMOTED_TRACE_METADATA_KEYS}
        if len(metadata) != len(info.trace_metadata):
            raise ValueError(f"trace {info.trace_id}: session, token or cost metadata is not written here")
        trace_id = info.trace_id
        rows["trace_info"].append({
            "request_id": trace_id, "experiment_id": experiment_id, "timestamp_ms": info.request_time,
            "execution_time_ms": info.execution_duration, "status": info.state.value,
            "client_request_id": info.client_request_id, "request_preview": info.request_preview,
            "response_preview": info.response_preview,
            # 0 from start_trace, advanced once when the spans were written
            "db_payload_generation": 1,
            "trace_name": validate_trace_name(info.tags.get(TraceTagKey.TRACE_NAME)),
            **dict.fromkeys(COLUMNS["trace_info"] - {
                "request_id", "experiment_id", "timestamp_ms", "execution_time_ms", "status",
                "client_request_id", "request_preview", "response_preview", "db_payload_generation",
                "trace_name"}),
        })
        tags = {k: v for k, v in info.tags.items() if k != TraceTagKey.TRACE_NAME}
        tags[TraceTagKey.SPANS_LOCATION] = SpansLocation.TRACKING_STORE.value
        tags.update({(t := store._get_trace_artifact_location_tag(experiment, trace_id)).key: t.value})
        rows["trace_tags"] += [{"request_id": trace_id, "key": k, "value": v} for k, v in tags.items()]
        metadata[TraceMetadataKey.TRACE_INFO_FINALIZED] = "true"
        rows["trace_request_metadata"] += [{"request_id": trace_id, "key": k, "value": v}
                                           for k, v in sorted(metadata.items())]
        rows["assessments"] += [_assessment_row(a, trace_id, experiment_id, info.request_time)
                                for a in info.assessments]
        rows["spans"].append(_span_row(span, experiment_id, ensure_ascii))
    return rows


def write_chunk(store: Any, experiment_id: str, built: list[tuple[Any, Any]]) -> bool:
    """Write (TraceInfo, root span) pairs in one transaction, one INSERT per table; False (nothing
    written, the reason logged) where a guard refuses or the database rolls the chunk back."""
    from mlflow.store.db.db_types import SQLITE
    from mlflow.store.tracking.utils.sql_trace_rollups import rollups_enabled
    from sqlalchemy import text

    try:
        tables = _tables()
        if rollups_enabled():
            raise SchemaChanged("MLflow's SQL trace rollups are on; their rebuild queue is not written here")
        experiment = store.get_experiment(experiment_id)
        if experiment.lifecycle_stage != "active":
            raise ValueError(f"experiment {experiment_id} is {experiment.lifecycle_stage}")
        rows = chunk_rows(store, experiment, built)
        with store.engine.connect() as conn:
            if store.db_type == SQLITE:  # what the store's own sessions set, before the transaction
                conn.execute(text("PRAGMA foreign_keys = ON"))
                conn.execute(text("PRAGMA busy_timeout = 20000"))
                conn.commit()  # ends SQLAlchemy's autobegun block; SQLite began no transaction for these
            with conn.begin():
                for name in COLUMNS:  # parents first: trace_info before its tags, assessments, spans
                    if rows[name]:
                        conn.execute(tables[name].insert(), rows[name])
    except Exception as exc:  # the chunk was rolled back whole (or never started); the public path redoes it
        log.warning("MLflow traces: one transaction per chunk refused (%s: %s); writing them through "
                    "the store one by one", type(exc).__name__, str(exc)[:300])
        return False
    return True
