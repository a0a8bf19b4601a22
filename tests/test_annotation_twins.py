"""Pairs with byte-identical texts share one Label Studio task.

PandaLM's test set reuses outputs: two generator pairs can carry the very same prompt and responses,
and pushing each as its own task showed annotators the same task twice (found by using the Label
Studio UI). Now one task is made and its labels are read for both pairs.
"""

from __future__ import annotations

import os
import sqlite3

import pytest
from test_annotation_server import SHOWN

from judgebias.annotation.keys import content_key, keyed_pairs
from judgebias.annotation.server import find_label_studio
from judgebias.annotation.store import Label, Ledger, PushedTask
from judgebias.tables.files import write_table

URL = "http://h"


def _label(annotation_id, task_id, key, pid, who, label):
    return Label(annotation_id, URL, task_id, key, pid, who, label, label is None, None,
                 f"2026-01-0{annotation_id}T00:00:00.000000+00:00")


def test_twins_share_a_task_and_its_labels_in_the_ledger(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    ledger.record_tasks([PushedTask("k1", "p1", 1, 7, True, URL, content_key="c1"),
                         PushedTask("k3", "p3", 1, 8, False, URL, content_key="c3")])
    ledger.record_tasks([PushedTask("k2", "p2", 1, 7, True, URL, content_key="c1")])  # p2: p1's twin
    assert ledger.tasks_by_content(URL)["c1"].pair_key == "k1"  # the first pushed is the one shared
    assert [t.pair_id for t in ledger.task_index(URL)[7]] == ["p1", "p2"]
    ledger.upsert_labels([_label(1, 7, "k1", "p1", "u1", "a"), _label(2, 7, "k1", "p1", "u2", "tie"),
                          _label(3, 8, "k3", "p3", "u1", None)])
    labels = ledger.labels()
    # Two annotations of task 7 read as labels of p1 and of p2; the skip of p3 is not a label.
    assert sorted(zip(labels["pair_id"], labels["annotator"], labels["label"], strict=True)) == [
        ("p1", "u1", "a"), ("p1", "u2", "tie"), ("p2", "u1", "a"), ("p2", "u2", "tie")]
    st = ledger.status()
    # 3 pairs on 2 tasks; 2 pairs labelled; annotations counted once: 2 labels, 1 skip.
    assert {k: st[k] for k in ("pushed", "tasks", "labelled", "pending", "labels", "skipped")} == {
        "pushed": 3, "tasks": 2, "labelled": 2, "pending": 1, "labels": 2, "skipped": 1}
    assert st["per_annotator"]["u1"] == {"labelled": 1, "skipped": 1, "both_bad": 0}


def test_a_version_3_ledger_is_upgraded_to_share_tasks(tmp_path):
    path = tmp_path / "old.sqlite"
    Ledger(path).record_tasks([PushedTask("k1", "p1", 1, 7, False, URL)])
    with sqlite3.connect(path) as con:  # back to version 3: no content_key, task ids unique
        con.execute("ALTER TABLE tasks DROP COLUMN content_key")
        con.execute("DROP INDEX tasks_by_server_task")
        con.execute("CREATE UNIQUE INDEX tasks_by_task ON tasks (server_url, task_id)")
        con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    ledger = Ledger(path)
    assert ledger.tasks_by_content(URL) == {}  # pushed before twins were known: never matched
    ledger.record_tasks([PushedTask("k2", "p2", 1, 7, False, URL, content_key="c1")])  # no longer unique
    assert len(ledger.task_index(URL)[7]) == 2


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.skipif(find_label_studio() is None and not os.environ.get("CI"),
                    reason="label-studio not installed (scripts/labelstudio_install.sh)")
def test_pandalm_twins_make_one_task_on_a_real_server(world, ls_server, tmp_path):
    from conftest import DATA

    from judgebias.annotation.sync import SyncSettings, sync
    from judgebias.importers.pandalm import import_pandalm
    from judgebias.tables.files import read_table

    table, _ = import_pandalm(DATA / "pandalm")
    keyed = keyed_pairs(table)
    groups = keyed.groupby("content_key").groups
    twins = [sorted(ids) for ids in groups.values() if len(ids) > 1]
    assert len(twins) == 2, "PandaLM's test set is expected to hold two pairs of twins"
    first, second = twins
    chosen = keyed.loc[[first[0], *second]].reset_index()  # one twin now, both of the other group
    path = write_table(table, tmp_path / "pandalm.jsonl")
    ledger = Ledger(tmp_path / "pandalm.labels.sqlite")
    client = world["client"]
    title = "judgebias twins test"
    res = client.push(chosen, ledger, project_title=title, seed=1)
    assert (res.pushed, res.shared) == (2, 1)
    assert len(list(world["sdk"].tasks.list(project=res.project_id))) == 2
    later = client.push(keyed.loc[[first[1]]].reset_index(), ledger, project_title=title, seed=1)
    assert (later.pushed, later.shared) == (0, 1)  # a twin drawn in a later batch joins the old task
    assert len(list(world["sdk"].tasks.list(project=res.project_id))) == 2

    tasks = ledger.tasks().set_index("pair_id")
    assert tasks.loc[first[0], "task_id"] == tasks.loc[first[1], "task_id"]
    assert tasks.loc[second[0], "task_id"] == tasks.loc[second[1], "task_id"]
    texts = keyed[["prompt", "response_a", "response_b"]]
    assert tasks["content_key"].tolist() == [content_key(*texts.loc[p]) for p in tasks.index]
    for pid, label in ((first[0], "b"), (second[0], "a")):
        world["sdk"].annotations.create(id=int(tasks.loc[pid, "task_id"]), completed_by=world["users"]["u1"],
                                        result=[{"from_name": "preference", "to_name": "prompt",
                                                 "type": "choices", "value": {"choices": [
                                                     SHOWN[label][int(tasks.loc[pid, "swapped"])]]}}])
    out = sync(SyncSettings(table=path, ledger=ledger.path, judges=["pandalm-7b"], log_mlflow=False,
                            reps=200), client=client)
    assert out.pull.counts.new == 2 and out.status["labelled"] == 4 and out.status["tasks"] == 2
    merged, _ = read_table(out.out_path)
    human = merged.drop_duplicates("pair_id").set_index("pair_id")["human_annotators"]
    # Each twin carries the one annotation of its task (on top of PandaLM's own three labels).
    for pid in (*first, *second):
        assert human[pid] == ["ls-user-" + str(world["users"]["u1"])], pid
