"""Traces into a database tracking URI, one transaction per chunk (``judgebias.tracking.trace_bulk``): the
same traces as MLflow's per-trace path, idempotent on rerun, and a refused chunk rolled back whole and
written the public way."""

from __future__ import annotations

import pytest
from test_mlflow_traces import small_table

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


def test_a_refused_chunk_is_rolled_back_and_written_the_public_way(sqlite_uri, monkeypatch, caplog):
    import mlflow

    real = trace_bulk.sql_store

    def failing_store():
        store = real()
        calls = []
        original = store.start_trace

        def start_trace(info):
            calls.append(info)
            if len(calls) == 3:  # two traces already flushed in the shared transaction
                raise RuntimeError("disk full")
            return original(info)

        store.start_trace = start_trace
        return store

    monkeypatch.setattr(trace_bulk, "sql_store", failing_store)
    mlflow.set_experiment("fallback")
    counts = log_judgment_traces(small_table(), self_map=SELF)
    assert (counts["logged"], counts["missing"]) == (14, 0)
    assert "one transaction per chunk refused" in caplog.text and "disk full" in caplog.text
    assert len(_content("fallback")) == 14  # nothing twice: the two flushed traces were rolled back
