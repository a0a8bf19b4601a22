"""The annotation loop against a REAL Label Studio server (started once per session on a free port).

Annotators are simulated through the API: the admin and a second user created through the API
(annotations posted with their ``completed_by``), with a tie, a skip, a disagreement and an edit
after a pull. Expected figures are computed by hand in ``check_scenario_figures``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pandas as pd
import pytest
from test_annotation_selection import SCENARIO_LABELS, check_scenario_figures, scenario_table

from judgebias.annotation.labelstudio import LabelStudioClient, LabelStudioError
from judgebias.annotation.selection import select_pairs
from judgebias.annotation.server import find_label_studio
from judgebias.annotation.store import Ledger
from judgebias.annotation.sync import SyncSettings, sync
from judgebias.tables.files import read_table

pytestmark = [
    pytest.mark.server,
    pytest.mark.slow,
    # CI installs the server, so there a missing one fails (in the session fixture) instead of skipping.
    pytest.mark.skipif(
        find_label_studio() is None and not os.environ.get("CI"),
        reason="label-studio not installed (scripts/labelstudio_install.sh)",
    ),
]

TITLE = "judgebias server test"
SHOWN = {"a": ("left", "right"), "b": ("right", "left"), "tie": ("tie", "tie")}  # (not swapped, swapped)


def _annotate(
    world, ledger: Ledger, pair_id: str, who: str, label: str | None, reason: str | None = None
) -> int:
    """Post an annotation as the annotator would: a choice of what was SHOWN (left / right / tie)."""
    task = ledger.tasks().set_index("pair_id").loc[pair_id]
    if label is None:
        result, cancelled = [], True
    else:
        shown = SHOWN[label][int(task["swapped"])]
        result = [
            {"from_name": "preference", "to_name": "prompt", "type": "choices", "value": {"choices": [shown]}}
        ]
        if reason:
            result.append(
                {"from_name": "reason", "to_name": "prompt", "type": "textarea", "value": {"text": [reason]}}
            )
        cancelled = False
    ann = world["sdk"].annotations.create(
        id=int(task["task_id"]), result=result, was_cancelled=cancelled, completed_by=world["users"][who]
    )
    return int(ann.id)


def test_push_pull_recompute_against_real_server(world, ls_server, monkeypatch, caplog, capfd, tmp_path):
    caplog.set_level(logging.DEBUG)
    client, sdk = world["client"], world["sdk"]
    ledger = Ledger(world["root"] / "judgments.labels.sqlite")
    table, _ = read_table(world["table"])

    sel = select_pairs(table, budget=10, judges=["J"])
    assert len(sel.chosen) == 6
    first = client.push(sel.chosen, ledger, project_title=TITLE, seed=3)
    assert (first.pushed, first.already_in_ledger, first.adopted_from_server) == (6, 0, 0)
    tasks = list(sdk.tasks.list(project=first.project_id))
    assert len(tasks) == 6
    for t in tasks:  # annotators see texts only: no generator or judge name travels with a task
        assert set(t.data) == {"prompt", "left", "right", "pair_key",
                               "prompt_html", "left_html", "right_html"}
        assert not {"J", "X", "Y", "G1", "G2"} & set(t.data.values())
    swaps = ledger.tasks()["swapped"]
    assert 0 < swaps.sum() < 6  # the seeded swap really shows some pairs B-first

    # Push twice: nothing new. A lost ledger: the server's tasks are adopted, not duplicated, and the
    # swap recovered from the shown texts equals the one recorded at the first push.
    again = client.push(sel.chosen, ledger, project_title=TITLE, seed=3)
    assert (again.pushed, again.already_in_ledger) == (0, 6)
    fresh = Ledger(tmp_path / "lost.labels.sqlite")
    adopted = client.push(sel.chosen, fresh, project_title=TITLE, seed=99)
    assert (adopted.pushed, adopted.adopted_from_server) == (0, 6)
    pd.testing.assert_frame_equal(
        fresh.tasks()[["pair_key", "task_id", "swapped"]].sort_values("pair_key").reset_index(drop=True),
        ledger.tasks()[["pair_key", "task_id", "swapped"]].sort_values("pair_key").reset_index(drop=True),
    )
    assert len(list(sdk.tasks.list(project=first.project_id))) == 6
    # A same-titled project that judgebias did not make is refused, not misread.
    sdk.projects.create(
        title="hand made",
        label_config='<View><Text name="t" value="$t"/>'
        '<Choices name="other" toName="t"><Choice value="x"/></Choices></View>',
    )
    with pytest.raises(LabelStudioError, match="has no 'preference' choice"):
        client.ensure_project("hand made")

    # Round 1 of annotations: two annotators, a tie, a skip, a disagreement on s3.
    _annotate(world, ledger, "s1", "u1", "b")
    _annotate(world, ledger, "s1", "u2", "b")
    _annotate(world, ledger, "s2", "u1", "a")
    _annotate(world, ledger, "s2", "u2", "tie")
    _annotate(world, ledger, "s3", "u1", "a")
    s3_u2 = _annotate(world, ledger, "s3", "u2", "b")
    _annotate(world, ledger, "s4", "u1", None)  # skipped
    _annotate(world, ledger, "s4", "u2", "a")
    _annotate(world, ledger, "s5", "u1", "tie", reason="both fine")
    _annotate(world, ledger, "s6", "u1", "a")

    pulled = client.pull(ledger)
    assert pulled.counts.as_dict() == {"new": 10, "updated": 0, "unchanged": 0, "deleted": 0}
    assert client.pull(ledger).counts.as_dict() == {"new": 0, "updated": 0, "unchanged": 10, "deleted": 0}
    labels = ledger.labels()
    assert len(labels) == 9 and labels["reason"].dropna().tolist() == ["both fine"]
    st = ledger.status()
    assert (st["pushed"], st["labelled"], st["pending"], st["skipped"]) == (6, 6, 0, 1)

    # An annotator changes their mind after the pull: s3 b -> a.
    shown_a = SHOWN["a"][int(ledger.tasks().set_index("pair_id").loc["s3", "swapped"])]
    sdk.annotations.update(
        id=s3_u2,
        result=[
            {
                "from_name": "preference",
                "to_name": "prompt",
                "type": "choices",
                "value": {"choices": [shown_a]},
            }
        ],
    )

    # The experiment's run, then a sync (pull + recompute + MLflow) linked to it.
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client_ml = mlflow.tracking.MlflowClient(uri)
    parent = client_ml.create_run(client_ml.create_experiment("judgebias-annotation-test"))
    client_ml.log_metric(parent.info.run_id, "J.dbg", 0.4)
    client_ml.set_terminated(parent.info.run_id)
    for var, value in (("LABEL_STUDIO_URL", ls_server.url), ("LABEL_STUDIO_API_KEY", ls_server.api_key)):
        monkeypatch.setenv(var, value)
    result = sync(
        SyncSettings(
            table=world["table"],
            judges=["J"],
            ledger=ledger.path,
            tracking_uri=uri,
            parent_run_id=parent.info.run_id,
            reps=500,
        )
    )
    assert result.pull.counts.as_dict() == {"new": 0, "updated": 1, "unchanged": 9, "deleted": 0}
    figures = result.figures["J"]
    check_scenario_figures(figures)
    iaa = figures["inter_annotator"]
    # Hand-computed in test_inter_annotator_by_hand on the same labels: (1+0+1)/3, Fleiss 5/11, Cohen 1/2.
    assert iaa["percent_agreement"] == pytest.approx(2 / 3)
    assert iaa["fleiss_kappa"] == pytest.approx(5 / 11) and iaa["cohen_kappa"] == pytest.approx(0.5)

    merged, _ = read_table(result.out_path)
    humans = merged.drop_duplicates("pair_id").set_index("pair_id")["human"]
    assert (
        sorted(humans["s3"]) == ["a", "a"] and humans["s4"] == ["a"] and sorted(humans["s2"]) == ["a", "tie"]
    )

    run = client_ml.get_run(result.run_id)
    assert run.info.experiment_id == parent.info.experiment_id
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert run.data.tags["judgebias.parent_run_id"] == parent.info.run_id
    st = result.status
    assert run.info.run_name.startswith(f"human labels: {st['labelled']} of {st['pushed']} pairs (")
    assert run.data.metrics["J.labelled_only.eo"] == pytest.approx(0.5)
    assert run.data.metrics["J.labelled_only.dbg_human_gold"] == pytest.approx(0.3)

    # The API token is in no MLflow param, tag, metric name or artifact, no log line and no output file.
    token = ls_server.api_key
    artifact_dir = Path(
        mlflow.artifacts.download_artifacts(
            run_id=result.run_id, dst_path=str(tmp_path / "art"), tracking_uri=uri
        )
    )
    artifact_text = "".join(p.read_text() for p in artifact_dir.rglob("*") if p.is_file())
    assert "labelled_only" in artifact_text
    out, err = capfd.readouterr()
    haystacks = {
        "params": json.dumps(run.data.params),
        "tags": json.dumps(run.data.tags),
        "metrics": json.dumps(list(run.data.metrics)),
        "artifacts": artifact_text,
        "logs": caplog.text,
        "stdout": out + err,
        "merged table": result.out_path.read_text(),
        "ledger": ledger.path.read_bytes().decode("latin-1"),
        "label studio server log": ls_server.log_path.read_text(errors="replace"),
    }
    leaks = [where for where, text in haystacks.items() if token in text]
    assert leaks == []
    assert run.data.params["label_studio_url"] == ls_server.url


def test_server_down_clear_error_ledger_intact_then_catch_up(world, ls_server, monkeypatch):
    from typer.testing import CliRunner

    from judgebias.cli import app

    client = world["client"]
    ledger = Ledger(world["root"] / "judgments.labels.sqlite")
    before = ledger.labels(include_skipped=True)
    assert len(before) == 10

    ls_server.stop()
    with pytest.raises(LabelStudioError, match=rf"Label Studio at {ls_server.url} is not reachable"):
        client.pull(ledger)
    pd.testing.assert_frame_equal(ledger.labels(include_skipped=True), before)
    monkeypatch.setenv("LABEL_STUDIO_URL", ls_server.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", ls_server.api_key)
    res = CliRunner().invoke(
        app, ["annotate", "pull", str(world["table"]), "--ledger", str(ledger.path), "--no-mlflow"]
    )
    assert res.exit_code == 1
    assert f"Label Studio at {ls_server.url} is not reachable" in res.output and "intact" in res.output
    assert ls_server.api_key not in res.output
    pd.testing.assert_frame_equal(ledger.labels(include_skipped=True), before)

    ls_server.start()
    _annotate(world, ledger, "s6", "u2", "b")
    res = CliRunner().invoke(
        app,
        [
            "annotate",
            "pull",
            str(world["table"]),
            "--ledger",
            str(ledger.path),
            "--no-mlflow",
            "--judge",
            "J",
            "--reps",
            "200",
        ],
    )
    assert res.exit_code == 0, res.output
    # A readable summary first (this ledger's tasks were hand-picked: no population estimate), no JSON.
    assert res.output.startswith("--no-mlflow: nothing logged") and "pulled: new 1, updated 0" in res.output
    assert "no probability batch in the ledger" in res.output and "{" not in res.output
    res = CliRunner().invoke(app, ["annotate", "pull", str(world["table"]), "--ledger", str(ledger.path),
                                   "--no-mlflow", "--judge", "J", "--reps", "200", "--json"])
    summary = json.loads(res.output[res.output.index("\n{") + 1:])
    assert summary["pulled"] == {"new": 0, "updated": 0, "unchanged": 11, "deleted": 0}
    assert len(ledger.labels()) == 10
    res = CliRunner().invoke(app, ["annotate", "status", "--ledger", str(ledger.path)])
    assert res.exit_code == 0 and "pairs pushed 6, labelled 6, pending 0" in res.output


def test_start_stop_scripts(ls_server, tmp_path):
    """scripts/labelstudio_start.sh and _stop.sh as a user runs them. The data dir is an online copy of
    the session server's migrated database, so this restart takes seconds instead of a first start."""
    import os
    import sqlite3
    import stat
    import subprocess
    import urllib.request

    from judgebias.annotation.server import free_port

    repo = Path(__file__).resolve().parents[1]
    data = tmp_path / "lsdata"
    data.mkdir()
    with (
        sqlite3.connect(ls_server.data_dir / "label_studio.sqlite3") as src,
        sqlite3.connect(data / "label_studio.sqlite3") as dst,
    ):
        src.backup(dst)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABEL_STUDIO_")}
    env.update(
        LABEL_STUDIO_DATA_DIR=str(data),
        LABEL_STUDIO_PORT=str(port),
        LABEL_STUDIO_USERNAME=ls_server.username,
        LABEL_STUDIO_PASSWORD=ls_server.password,
        LABEL_STUDIO_API_KEY=ls_server.api_key,
        LABEL_STUDIO_VENV=str(Path(find_label_studio()).parents[1]),
    )

    def run(script):
        return subprocess.run(
            ["bash", str(repo / "scripts" / script)], env=env, capture_output=True, text=True, timeout=300
        )

    started = run("labelstudio_start.sh")
    try:
        assert started.returncode == 0, started.stderr
        assert ls_server.api_key not in started.stdout + started.stderr  # the token is never printed
        envfile = data / "labelstudio.env"
        assert stat.S_IMODE(envfile.stat().st_mode) == 0o600
        saved = dict(line.removeprefix("export ").split("=", 1) for line in envfile.read_text().splitlines())
        assert saved["LABEL_STUDIO_URL"] == f"http://127.0.0.1:{port}"
        req = urllib.request.Request(
            f"{saved['LABEL_STUDIO_URL']}/api/current-user/whoami",
            headers={"Authorization": f"Token {saved['LABEL_STUDIO_API_KEY']}"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["email"] == ls_server.username
        again = run("labelstudio_start.sh")  # idempotent: the running server is reported, not doubled
        assert again.returncode == 0 and "already running" in again.stdout
        pid = int((data / "labelstudio.pid").read_text())
    finally:
        stopped = run("labelstudio_stop.sh")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert not (data / "labelstudio.pid").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "nothing to stop" in run("labelstudio_stop.sh").stdout


def test_pipeline_stage_sync_annotations_wires_into_sync(ls_server, monkeypatch, tmp_path):
    """The nightly flow's stage (judgebias.annotation.experiment.sync_annotations) on a run folder: push the
    next batch from the config's budget, then pull labels, merge and log, through
    judgebias.annotation.sync.sync."""
    from judgebias.annotation.experiment import sync_annotations
    from judgebias.config.experiment import ExperimentConfig
    from judgebias.runs.store import RunStore

    model = {"model": "smollm2-135m-instruct"}
    cfg = ExperimentConfig.model_validate(
        {
            "name": "annotation-wiring",
            "generators": [{"name": n, **model} for n in ("J", "X", "Y")],
            "judges": [{"name": n, **model} for n in ("J", "G1", "G2")],
            "self_map": {"J": "J"},
            "annotation": {"budget": 4, "project_title": "judgebias stage wiring"},
            "tracking": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
        }
    )
    store = RunStore(tmp_path / "run")
    store.write_frame("table.parquet", scenario_table())
    monkeypatch.setenv("LABEL_STUDIO_URL", ls_server.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", ls_server.api_key)

    first = sync_annotations(cfg, store, push=True)
    ledger = Ledger(store.path("table.labels.sqlite"))
    k = int(ledger.draws()["selected"].sum())  # a Poisson batch: 4 expected, its size is random
    assert k >= 1 and first["pushed"] == k and first["status"]["pending"] == k
    # The four pushed were drawn by the config's design (Poisson by default), recorded before the push:
    # every one of the 6 pairs has its inclusion probability in the ledger.
    draws = ledger.draws()
    assert len(draws) == 6 and draws["pi"].sum() == pytest.approx(4) and (draws["pi"] > 0).all()
    assert set(ledger.tasks()["pair_id"]) == set(draws.loc[draws["selected"], "pair_id"])
    sdk = LabelStudioClient(ls_server.settings)._ls
    world = {"sdk": sdk, "users": {"u1": sdk.users.whoami().id}}
    pushed = set(ledger.tasks()["pair_id"])
    for pid in pushed:
        _annotate(world, ledger, pid, "u1", SCENARIO_LABELS[pid].get("u1", "a"))
    second = sync_annotations(cfg, store, push=False)
    assert second["pulled"]["new"] == k and second["pushed"] == 0
    merged, _ = read_table(second["out"])
    labelled = merged.drop_duplicates("pair_id").set_index("pair_id")["human"].map(len)
    assert set(labelled[labelled > 0].index) == pushed
    assert second["mlflow_run_id"] and second["figures"]["J"]["labels"]["annotations"] == k
    # The labelled pairs are a probability sample: the figures are population estimates.
    assert second["figures"]["J"]["design"]["labelled"] == k and "eo" in second["figures"]["J"]["estimates"]
