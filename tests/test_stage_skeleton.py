"""The stage skeleton (``judgebias.stages._common.stage_output``): read back or computed once, timed,
written atomically, with the console's ran/reused outcome; on a run folder in a temporary directory."""

from __future__ import annotations

import pandas as pd
import pytest

from judgebias.runs.store import RunStore, watch
from judgebias.stages._common import document, frame, frames, stage_output


def test_an_output_is_computed_once_then_read_back(tmp_path):
    store = RunStore(tmp_path)
    calls = []

    def compute(info: dict) -> pd.DataFrame:
        calls.append(1)
        info["n"] = 2
        return pd.DataFrame({"x": [1, 2]})

    with watch() as first:
        out = stage_output(store, frame("a.parquet"), "stage_a", compute)
    assert first.outcome == "ran" and len(calls) == 1
    assert store.read_frame("a.parquet").equals(out)
    record = store.manifest()["stages"]["stage_a"]
    assert record["n"] == 2 and record["seconds"] >= 0

    with watch() as second:
        again = stage_output(store, frame("a.parquet"), "stage_a", compute)
    assert second.outcome == "reused" and len(calls) == 1  # nothing computed, nothing timed again
    assert again.equals(out)
    assert store.manifest()["stages"]["stage_a"] == record


def test_an_untimed_stage_leaves_the_manifest_alone(tmp_path):
    store = RunStore(tmp_path)
    with watch() as seen:
        stage_output(store, document("b.json"), None, lambda info: {"k": 1})
    assert seen.outcome == "ran"
    assert store.read_json("b.json") == {"k": 1}
    assert not store.path("manifest.json").exists()


def test_then_runs_after_the_output_is_written_and_only_when_computed(tmp_path):
    store = RunStore(tmp_path)
    seen_on_disk = []

    def then(result):
        seen_on_disk.append(store.read_json("c.json"))  # what the run's page does: read it back

    stage_output(store, document("c.json"), "stage_c", lambda info: {"v": 3}, then=then)
    stage_output(store, document("c.json"), "stage_c", lambda info: {"v": 4}, then=then)
    assert seen_on_disk == [{"v": 3}]


def test_several_frames_are_done_only_when_all_are_there(tmp_path):
    store = RunStore(tmp_path)
    names = {"g1": "r/g1.parquet", "g2": "r/g2.parquet"}
    store.write_frame("r/g1.parquet", pd.DataFrame({"x": [0]}))  # a run killed after the first one
    computed = {"g1": pd.DataFrame({"x": [1]}), "g2": pd.DataFrame({"x": [2]})}
    out = stage_output(store, frames(names), "rewrite", lambda info: computed)
    assert out is computed
    assert store.read_frame("r/g1.parquet")["x"].tolist() == [1]
    back = stage_output(store, frames(names), "rewrite", lambda info: pytest.fail("computed again"))
    assert {k: v["x"].tolist() for k, v in back.items()} == {"g1": [1], "g2": [2]}


def test_a_failed_computation_writes_nothing_and_records_no_time(tmp_path):
    store = RunStore(tmp_path)

    def compute(info):
        raise ValueError("no judgments")

    with pytest.raises(ValueError, match="no judgments"):
        stage_output(store, frame("d.parquet"), "stage_d", compute)
    assert not store.path("d.parquet").exists()
    assert "stage_d" not in store.manifest()["stages"]
