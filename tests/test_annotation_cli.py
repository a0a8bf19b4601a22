"""``judgebias annotate`` without a server: ranking, helpful errors, offline recompute from a ledger."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from test_annotation_selection import SCENARIO_LABELS, check_scenario_figures, scenario_table
from typer.testing import CliRunner

from judgebias.annotation.keys import pair_key
from judgebias.annotation.labelstudio import (
    LabelStudioClient,
    LabelStudioError,
    ServerSettings,
    project_title,
)
from judgebias.annotation.selection import select_pairs
from judgebias.annotation.store import Label, Ledger, PushedTask
from judgebias.cli import app
from judgebias.tables.files import read_table, write_table

runner = CliRunner()


@pytest.fixture
def table_path(tmp_path):
    return write_table(scenario_table(), tmp_path / "judgments.jsonl")


def test_push_dry_run_shows_the_design_without_a_server(table_path, monkeypatch):
    monkeypatch.delenv("LABEL_STUDIO_URL", raising=False)
    args = ["annotate", "push", str(table_path), "--judge", "J", "--budget", "4", "--dry-run"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    # The default Poisson design: the floor is half the uniform rate, 0.5 * 4/6 = 0.333.
    assert "batch 1: poisson design over population 'all' (6 pairs" in res.output
    assert "inclusion probability 0.333-" in res.output
    # Why the batch is not 4 pairs (issue 34, item 12): each pair is drawn on its own, so the size
    # is random around sum(pi), which the design makes equal to the budget.
    drew = re.search(r"drew (\d+);", res.output).group(1)
    assert (f"the poisson design draws each pair on its own with its probability, so the batch size is "
            f"random: expected 4.0 (--budget 4), drawn {drew}") in " ".join(res.output.split())
    res = runner.invoke(app, [*args, "--design", "stratified"])
    # Three strata: 1 other pair, 4 own pairs where J agrees with gold, 1 where it disagrees (no flips).
    # Each gets min(2, N_h) first: 1 + 2 + 1 = 4 spends the budget, so pi = 1, 2/4 and 1.
    assert "batch 1: stratified design over population 'all' (6 pairs" in res.output
    assert "drew 4; inclusion probability 0.500-1.000" in res.output
    assert "own|agree|steady             2" in res.output
    assert not (table_path.parent / "judgments.labels.sqlite").exists()  # a dry run records nothing
    res = runner.invoke(app, ["annotate", "push", str(table_path), "--design", "census", "--dry-run"])
    assert res.exit_code == 1 and "unknown design 'census'" in res.output


def test_push_without_credentials_says_which_variable(table_path, monkeypatch):
    monkeypatch.delenv("LABEL_STUDIO_URL", raising=False)
    monkeypatch.delenv("LABEL_STUDIO_API_KEY", raising=False)
    res = runner.invoke(app, ["annotate", "push", str(table_path), "--budget", "1"])
    assert res.exit_code == 1
    assert "LABEL_STUDIO_URL and LABEL_STUDIO_API_KEY not set" in res.output
    assert "labelstudio.env" in res.output


def test_bad_self_mapping_and_missing_ledger(table_path):
    res = runner.invoke(app, ["annotate", "push", str(table_path), "--self", "J", "--dry-run"])
    assert res.exit_code != 0 and "JUDGE=GENERATOR" in res.output
    res = runner.invoke(app, ["annotate", "status", str(table_path)])
    assert res.exit_code == 1 and "nothing pushed yet" in res.output


def test_unreachable_server_names_url_and_keeps_ledger(tmp_path):
    from judgebias.annotation.server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    ledger = Ledger(tmp_path / "l.sqlite")
    ledger.record_tasks([PushedTask("pk-1", "s1", 1, 5, False, url)])
    client = LabelStudioClient(ServerSettings(url, "not-a-real-token"), timeout=2, max_retries=0)
    with pytest.raises(LabelStudioError, match=rf"Label Studio at {url} is not reachable") as err:
        client.pull(ledger)
    assert "not-a-real-token" not in str(err.value)
    assert len(ledger.tasks()) == 1


def test_offline_pull_recomputes_from_ledger(table_path, tmp_path):
    """The ledger as a real pull leaves it (swapped tasks, a skip, an edited annotation) -> figures."""
    table, _ = read_table(table_path)
    sel = select_pairs(table, 10, judges=["J"])
    ledger = Ledger(tmp_path / "judgments.labels.sqlite")
    url = "http://ls.example"
    ledger.record_tasks(
        PushedTask(r.pair_key, r.pair_id, 1, 100 + i, i % 2 == 0, url)
        for i, r in enumerate(sel.chosen.itertuples())
    )
    labels, aid = [], 0
    for pid, by in SCENARIO_LABELS.items():
        key = pair_key(pid, f"prompt {pid}", f"A of {pid}", f"B of {pid}")
        for who, lab in by.items():
            aid += 1
            labels.append(Label(aid, url, 0, key, pid, who, lab, False, None, "2026-01-02T00:00:00+00:00"))
    s4 = pair_key("s4", "prompt s4", "A of s4", "B of s4")
    labels.append(Label(99, url, 0, s4, "s4", "u1", None, True, None, "2026-01-01T00:00:00+00:00"))
    ledger.upsert_labels(labels)
    out = tmp_path / "merged.jsonl"
    res = runner.invoke(
        app,
        [
            "annotate",
            "pull",
            str(table_path),
            "--offline",
            "--judge",
            "J",
            "--ledger",
            str(ledger.path),
            "--out",
            str(out),
            "--reps",
            "200",
        ],
    )
    assert res.exit_code == 0, res.output
    assert res.output.startswith("offline: Label Studio not contacted")
    first = res
    res = runner.invoke(app, ["annotate", "pull", str(table_path), "--offline", "--judge", "J", "--ledger",
                              str(ledger.path), "--out", str(out), "--reps", "200", "--json"])
    summary = json.loads(res.output[res.output.index("\n{") + 1:])
    check_scenario_figures(summary["figures"]["J"])
    # The second pull shows each figure beside its value at the first (the same labels: equal).
    assert "(was " not in first.output and "(was " in res.output
    assert summary["previous_figures"]["J"]["estimates"] == summary["figures"]["J"]["estimates"]
    merged, _ = read_table(out)
    assert merged.drop_duplicates("pair_id").set_index("pair_id").loc["s1", "human"] == ["b", "b"]
    res = runner.invoke(app, ["annotate", "status", "--ledger", str(ledger.path)])
    assert "ledger: pairs pushed 6, labelled 6, pending 0; labels 9 (both bad 0), skipped 1" in res.output
    assert "ls-user" not in res.output and "u1" in res.output


def test_self_map_accepts_a_plain_generator_name():
    table = scenario_table()
    renamed = table.assign(
        generator_a=table["generator_a"].replace("J", "J-base"),
        generator_b=table["generator_b"].replace("J", "J-base"),
    )
    sel = select_pairs(renamed, 10, judges=["J"], self_map={"J": "J-base"})
    assert set(sel.chosen.loc[sel.chosen["self"] > 0, "pair_id"]) == {"s1", "s2", "s3", "s4", "s5"}


def test_self_set_also_read_from_the_judge_generator_column():
    # Importers fill judge_generator (``--judge-generator J=J-base``); ranking and metrics agree on it.
    table = scenario_table()
    renamed = table.assign(
        generator_a=table["generator_a"].replace("J", "J-base"),
        generator_b=table["generator_b"].replace("J", "J-base"),
        judge_generator=table["judge"].map({"J": "J-base"}),
    )
    sel = select_pairs(renamed, 10, judges=["J"])
    assert set(sel.chosen.loc[sel.chosen["self"] > 0, "pair_id"]) == {"s1", "s2", "s3", "s4", "s5"}


class _RecordedExport(LabelStudioClient):
    """The client with ``export`` answering a recorded Label Studio 1.23 JSON export (no network)."""

    def __init__(self, payload):
        super().__init__(ServerSettings("http://ls.example", "token-not-used"))
        self.payload = payload

    def export(self, project_id):
        return self.payload[project_id]


def _ann(aid, choice, who=1, at="2026-11-21T05:08:00.677369Z", cancelled=False):
    result = (
        []
        if choice is None
        else [
            {
                "from_name": "preference",
                "to_name": "prompt",
                "type": "choices",
                "value": {"choices": [choice]},
            }
        ]
    )
    return {"id": aid, "completed_by": who, "result": result, "was_cancelled": cancelled, "updated_at": at}


def test_pull_maps_back_counts_odd_annotations_and_ignores_foreign_tasks(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    url = "http://ls.example"
    ledger.record_tasks(
        [PushedTask("pk-1", "s1", 7, 11, True, url), PushedTask("pk-2", "s2", 7, 12, False, url)]
    )
    payload = {
        7: [
            {
                "id": 11,
                "data": {"pair_key": "pk-1"},
                "annotations": [_ann(1, "left"), _ann(2, "right", who=2)],
            },
            {
                "id": 12,
                "data": {"pair_key": "pk-2"},
                "annotations": [_ann(3, "maybe"), _ann(4, None, cancelled=True)],
            },
            {"id": 13, "data": {"pair_key": "someone-else"}, "annotations": [_ann(5, "left")]},
        ]
    }
    result = _RecordedExport(payload).pull(ledger)
    assert result.counts.as_dict() == {"new": 3, "updated": 0, "unchanged": 0, "deleted": 0}
    assert (result.tasks_seen, result.unknown_tasks) == (2, 1)
    assert result.exclusions.to_dict() == {"unreadable_annotation": 1}
    assert "annotation 3" in result.exclusions.examples["unreadable_annotation"][0]
    labels = ledger.labels(include_skipped=True).set_index("annotation_id")
    # Task 11 was shown swapped: "left" is the original B, "right" the original A.
    assert labels.loc[1, "label"] == "b" and labels.loc[2, "label"] == "a"
    assert labels.loc[4, "skipped"] and labels.loc[4, "label"] is None


def test_project_title_checked_before_the_batch_is_recorded(tmp_path):
    with pytest.raises(ValueError, match="Label Studio takes 3 to 50"):
        project_title("x")
    with pytest.raises(ValueError, match=r"too long \(51 characters\)"):
        project_title("t" * 51)
    assert project_title("  judgebias pairs ") == "judgebias pairs"  # as the server stores it

    path = write_table(scenario_table(), tmp_path / "judgments.jsonl")
    env = {**os.environ, "LABEL_STUDIO_URL": "http://127.0.0.1:9", "LABEL_STUDIO_API_KEY": "k"}
    done = subprocess.run([sys.executable, "-m", "judgebias", "annotate", "push", str(path), "--budget", "2",
                           "--project-title", "x"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "project title 'x' is too short (1 characters): Label Studio takes 3 to 50 (--project-title)"]
    assert not (tmp_path / "judgments.labels.sqlite").exists()  # nothing drawn, nothing recorded
