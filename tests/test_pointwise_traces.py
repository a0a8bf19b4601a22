"""Pointwise judgments as MLflow traces and back (``judgebias.tracking.pointwise_traces``, ``analyze
--traces`` on a pointwise table, ``judgebias import mlflow``), against a real MLflow server on 127.0.0.1."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_mlflow_traces import _cli
from test_pointwise_mlflow import table as scored_table

from judgebias.tables.files import read_raw, write_table
from judgebias.tables.pointwise import validate_pointwise
from judgebias.tracking.judgment_traces import KEY_TAG, hash_annotator
from judgebias.tracking.pointwise_traces import pointwise_record

SECRET = "sk-do-not-log-0123456789"
COLUMNS = ["item_id", "judge", "prompt", "response", "generator", "score", "score_argmax", "scale_min",
           "scale_max", "criterion"]


def small_table() -> pd.DataFrame:
    """test_pointwise_mlflow's 8 rows (judge j with human scores, judge org/g without), one row whose
    judge gave no score, and an item rated by humans only."""
    base = scored_table()
    extra = pd.DataFrame([
        dict(item_id="i6", prompt="q6", response="answer 6", generator="m", judge="j", score=None,
             scale_min=1, scale_max=5, criterion="overall", human_scores=[2],
             judge_error="no score after '[['", raw_output="I think it is fine"),
        dict(item_id="i7", prompt="q7", response="answer 7", generator="m", judge="", score=None,
             scale_min=1, scale_max=5, criterion="overall", human_scores=[4, 1]),
    ])
    out = pd.concat([base, extra], ignore_index=True)
    out["api_key"] = SECRET
    return validate_pointwise(out)[0]


def test_a_pointwise_trace_records_the_score_and_the_humans_as_feedback():
    rows = {(r["item_id"], r["judge"]): r for r in small_table().to_dict("records")}
    rec = pointwise_record(rows["i1", "j"])
    # i1: j scored 2; the humans 1 and 3 (raters by position on the item: i1#0, i1#1).
    assert rec["feedback"] == [("score", 2.0, "LLM_JUDGE", "j", None),
                               ("score", 1.0, "HUMAN", hash_annotator("i1#0"), None),
                               ("score", 3.0, "HUMAN", hash_annotator("i1#1"), None)]
    assert rec["inputs"]["response"] == "answer 1" and rec["inputs"]["scale_max"] == 5
    assert rec["tags"]["judgebias.layout"] == "pointwise-v1" and rec["tags"]["judgebias.item_id"] == "i1"
    no_score = pointwise_record(rows["i6", "j"])
    assert no_score["feedback"][0] == ("score", None, "LLM_JUDGE", "j", "no score after '[['")
    assert no_score["outputs"]["raw_output"] == "I think it is fine"
    # the pairwise previews in words are for pairwise records; a pointwise trace keeps its JSON
    from judgebias.tracking.judgment_traces import _trace

    info, _ = _trace(rec, "1", None, 0)
    assert info.request_preview.startswith("{") and '"answer 1"' in info.request_preview
    humans_only = pointwise_record(rows["i7", ""])
    assert [f[2] for f in humans_only["feedback"]] == ["HUMAN", "HUMAN"]
    records = [pointwise_record(r) for r in rows.values()]
    assert SECRET not in json.dumps(records, default=str)
    assert len({r["tags"][KEY_TAG] for r in records}) == len(records) == 10


@pytest.mark.server
def test_pointwise_judgments_round_trip_through_a_real_mlflow_server(mlflow_server, tmp_path,
                                                                      monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    table = small_table()
    src = write_table(table, tmp_path / "scores.parquet")
    common = ["--self", "j=j", "--reps", "200"]
    out = _cli(["analyze", str(src), "--out", str(tmp_path / "a.json"), "--traces", *common],
               mlflow_server, "scores")
    assert "MLflow traces: 10 logged, 0 already there" in out
    again = _cli(["analyze", str(src), "--out", str(tmp_path / "a2.json"), "--traces", *common],
                 mlflow_server, "scores")
    assert "MLflow traces: 0 logged, 10 already there" in again

    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("scores")
    traces = client.search_traces(locations=[experiment.experiment_id], max_results=100)
    assert len(traces) == 10  # the rerun added none
    by_key = {(t.info.tags["judgebias.item_id"], t.info.tags["judgebias.judge"]): t for t in traces}
    feedback = sorted((a.source.source_type, a.source.source_id, a.value)
                      for a in by_key["i3", "j"].info.assessments)
    # i3: j scored 3; humans 2 and 4.
    assert feedback == sorted([("LLM_JUDGE", "j", 3.0), ("HUMAN", hash_annotator("i3#0"), 2.0),
                               ("HUMAN", hash_annotator("i3#1"), 4.0)])
    assert SECRET not in json.dumps([t.to_dict() for t in traces], default=str)

    back_out = _cli(["import", "mlflow", "--experiment", "scores", "--out", str(tmp_path / "back.parquet")],
                    mlflow_server, "scores")
    assert "pointwise rows: 10" in back_out
    back, _ = validate_pointwise(read_raw(tmp_path / "back.parquet"))
    ordered = table.sort_values(["item_id", "judge"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(back[COLUMNS], ordered[COLUMNS], check_dtype=False)
    assert [sorted(h) for h in back["human_scores"]] == [sorted(h) for h in ordered["human_scores"]]
    assert back.set_index(["item_id", "judge"]).loc[("i6", "j"), "judge_error"] == "no score after '[['"

    # analyze on what came back equals analyze on the original in the same row order.
    write_table(ordered, tmp_path / "ordered.parquet")
    for name in ("back", "ordered"):
        _cli(["analyze", str(tmp_path / f"{name}.parquet"), "--out", str(tmp_path / f"{name}.json"),
              "--no-mlflow", *common], mlflow_server, "scores")
    figures = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in ("back", "ordered")}
    assert figures["back"] == figures["ordered"]
