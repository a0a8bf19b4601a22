"""Label Studio payloads (recorded) and the labels ledger, without a server: pair keys, the shown
order mapped back, what a task shows, annotations parsed, upserts, schema upgrades."""

from __future__ import annotations

import pandas as pd
import pytest

from judgebias.annotation.keys import pair_key, swapped
from judgebias.annotation.labelstudio import (
    LabelStudioError,
    ServerSettings,
    parse_annotation,
    shown_to_original,
    task_data,
)
from judgebias.annotation.store import Label, Ledger, PushedTask, default_ledger_path


def test_pair_key_changes_with_texts_and_hides_names():
    k = pair_key("bloom-7b_llama-7b/12", "p", "a", "b")
    assert k == pair_key("bloom-7b_llama-7b/12", "p", "a", "b")
    assert k != pair_key("bloom-7b_llama-7b/12", "p", "a", "b edited")
    assert "llama" not in k and k.startswith("pk-")
    swaps = [swapped(pair_key(str(i), "p", "a", "b"), seed=7) for i in range(200)]
    assert 70 < sum(swaps) < 130  # a fair coin, not a constant
    assert swaps == [swapped(pair_key(str(i), "p", "a", "b"), seed=7) for i in range(200)]
    assert swaps != [swapped(pair_key(str(i), "p", "a", "b"), seed=8) for i in range(200)]


def test_shown_choice_maps_back_to_original_terms():
    assert shown_to_original("left", swapped=False) == "a"
    assert shown_to_original("right", swapped=False) == "b"
    assert shown_to_original("left", swapped=True) == "b"
    assert shown_to_original("Response 2", swapped=True) == "a"
    assert shown_to_original("tie", swapped=True) == "tie"
    with pytest.raises(ValueError, match="unknown choice"):
        shown_to_original("both", swapped=False)


def test_task_data_shows_only_texts():
    row = pd.DataFrame(
        [
            {
                "pair_id": "x",
                "pair_key": "pk-1",
                "prompt": "P",
                "response_a": "RA",
                "response_b": "RB",
                "generator_a": "gpt-4",
                "generator_b": "vicuna",
            }
        ]
    ).iloc[0]
    assert task_data(row, swapped=True) == {"prompt": "P", "left": "RB", "right": "RA", "pair_key": "pk-1",
                                            "prompt_html": "<p>P</p>\n", "left_html": "<p>RB</p>\n",
                                            "right_html": "<p>RA</p>\n"}


def test_parse_annotation_recorded_payload():
    # Recorded from label-studio 1.23 JSON export (annotation of a swapped task by user 2).
    ann = {
        "id": 7,
        "completed_by": 2,
        "was_cancelled": False,
        "updated_at": "2026-11-21T05:08:00.677369Z",
        "result": [
            {
                "from_name": "preference",
                "to_name": "prompt",
                "type": "choices",
                "value": {"choices": ["left"]},
            },
            {
                "from_name": "reason",
                "to_name": "prompt",
                "type": "textarea",
                "value": {"text": ["more accurate"]},
            },
        ],
    }
    task = PushedTask("pk-1", "p1", 1, 11, True, "http://h")
    lab = parse_annotation(ann, task)
    assert (lab.label, lab.skipped, lab.annotator, lab.reason) == ("b", False, "ls-user-2", "more accurate")
    assert lab.updated_at == "2026-11-21T05:08:00.677369+00:00"
    skip = parse_annotation(
        {
            "id": 8,
            "completed_by": {"id": 3},
            "was_cancelled": True,
            "result": [],
            "updated_at": "2026-11-21T05:08:00Z",
        },
        task,
    )
    assert (skip.label, skip.skipped, skip.annotator) == (None, True, "ls-user-3")


def test_both_bad_is_a_tie_the_ledger_remembers(tmp_path):
    # "Both bad" (hotkey 4) counts as a tie in every preference figure; the ledger keeps that it was
    # one, also through an edit back to an ordinary choice.
    task = PushedTask("pk-1", "p1", 1, 11, True, "http://h")
    ann = {"id": 9, "completed_by": 2, "was_cancelled": False, "updated_at": "2026-11-23T10:00:00Z",
           "result": [{"from_name": "preference", "to_name": "prompt", "type": "choices",
                       "value": {"choices": ["both_bad"]}}]}
    lab = parse_annotation(ann, task)
    assert (lab.label, lab.both_bad, lab.skipped) == ("tie", True, False)
    tie = parse_annotation({**ann, "result": [{**ann["result"][0], "value": {"choices": ["tie"]}}]}, task)
    assert (tie.label, tie.both_bad) == ("tie", False)
    ledger = Ledger(tmp_path / "t.labels.sqlite")
    ledger.record_tasks([task])
    ledger.upsert_labels([lab])
    assert ledger.labels()[["label", "both_bad"]].values.tolist() == [["tie", 1]]
    edited = parse_annotation({**ann, "updated_at": "2026-11-23T11:00:00Z",
                               "result": [{**ann["result"][0], "value": {"choices": ["left"]}}]}, task)
    assert ledger.upsert_labels([edited]).updated == 1
    assert ledger.labels()[["label", "both_bad"]].values.tolist() == [["b", 0]]


def test_a_ledger_of_the_previous_schema_gains_the_both_bad_column(tmp_path):
    import sqlite3

    path = tmp_path / "old.labels.sqlite"
    Ledger(path).upsert_labels([])  # a fresh ledger, then made to look like schema 2
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE labels DROP COLUMN both_bad")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    ledger = Ledger(path)
    ledger.record_tasks([PushedTask("k1", "p1", 1, 101, False, "http://h")])
    ledger.upsert_labels([_label(1, "k1", "p1", "u1", "a", "2026-01-01T00:00:00+00:00")])
    assert ledger.labels()[["label", "both_bad"]].values.tolist() == [["a", 0]]


def test_settings_from_env_names_missing_variables(monkeypatch):
    monkeypatch.delenv("LABEL_STUDIO_URL", raising=False)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "secret-token-value")
    with pytest.raises(LabelStudioError, match="LABEL_STUDIO_URL not set"):
        ServerSettings.from_env()
    monkeypatch.setenv("LABEL_STUDIO_URL", "http://127.0.0.1:9/")
    settings = ServerSettings.from_env()
    assert settings.url == "http://127.0.0.1:9" and "secret-token-value" not in repr(settings)


def _label(aid, key, pid, who, label, at, skipped=False):
    return Label(aid, "http://h", 100 + aid, key, pid, who, label, skipped, None, at)


def test_ledger_upserts_latest_version_once(tmp_path):
    ledger = Ledger(tmp_path / "t.labels.sqlite")
    assert (
        default_ledger_path(tmp_path / "run" / "judgments.jsonl")
        == tmp_path / "run" / "judgments.labels.sqlite"
    )
    assert (
        ledger.record_tasks(
            [
                PushedTask("k1", "p1", 1, 101, False, "http://h"),
                PushedTask("k2", "p2", 1, 102, True, "http://h"),
            ]
        )
        == 2
    )
    assert ledger.record_tasks([PushedTask("k1", "p1", 1, 101, True, "http://h")]) == 0  # swap never changes
    assert not ledger.tasks().set_index("pair_key").loc["k1", "swapped"]
    c1 = ledger.upsert_labels(
        [
            _label(1, "k1", "p1", "u1", "a", "2026-01-01T00:00:00+00:00"),
            _label(2, "k1", "p1", "u2", None, "2026-01-01T00:00:00+00:00", skipped=True),
        ]
    )
    assert c1.as_dict() == {"new": 2, "updated": 0, "unchanged": 0, "deleted": 0}
    c2 = ledger.upsert_labels([_label(1, "k1", "p1", "u1", "a", "2026-01-01T00:00:00+00:00")])
    assert c2.unchanged == 1 and c2.new == 0
    c3 = ledger.upsert_labels([_label(1, "k1", "p1", "u1", "b", "2026-01-02T00:00:00+00:00")])
    assert c3.updated == 1
    stale = ledger.upsert_labels([_label(1, "k1", "p1", "u1", "tie", "2025-12-31T00:00:00+00:00")])
    assert stale.unchanged == 1  # an older version never overwrites a newer one
    labels = ledger.labels()
    assert labels[["annotation_id", "label"]].values.tolist() == [[1, "b"]]
    st = ledger.status()
    assert (st["pushed"], st["labelled"], st["pending"], st["skipped"]) == (2, 1, 1, 1)
    assert st["per_annotator"] == {"u1": {"labelled": 1, "skipped": 0, "both_bad": 0},
                                   "u2": {"labelled": 0, "skipped": 1, "both_bad": 0}}
    # A full export of task 101 without annotation 1: it was deleted on the server.
    gone = ledger.upsert_labels([], seen_tasks=[101], server_url="http://h")
    assert gone.deleted == 1 and ledger.labels().empty
