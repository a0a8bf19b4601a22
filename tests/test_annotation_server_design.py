"""The probability design end to end against a REAL Label Studio server: a uniform batch of PandaLM
pairs pushed, labelled through the API and estimated (checked against the textbook formulas), two
concurrent pushes, and a pull aimed at another server than the ledger's."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from conftest import annotator
from test_annotation_server import SHOWN

from judgebias.annotation.labelstudio import LabelStudioError
from judgebias.annotation.server import find_label_studio
from judgebias.annotation.store import Ledger
from judgebias.tables.files import write_table

pytestmark = [
    pytest.mark.server,
    pytest.mark.slow,
    pytest.mark.skipif(
        find_label_studio() is None and not os.environ.get("CI"),
        reason="label-studio not installed (scripts/labelstudio_install.sh)",
    ),
]


def test_probability_sample_pushed_labelled_pulled_and_estimated(world, ls_server, monkeypatch, tmp_path):
    """A uniform probability batch of real PandaLM pairs goes to the server through `annotate push`,
    three annotators label all but two drawn pairs through the API with PandaLM's own human labels,
    and `annotate pull` estimates judge-human agreement for the population; the Hájek figure and its
    interval are recomputed here from the textbook formulas, the PPI++ one with the estimator."""
    import math

    import numpy as np
    from conftest import DATA
    from typer.testing import CliRunner

    from judgebias.cli import app
    from judgebias.importers.pandalm import import_pandalm
    from judgebias.metrics.human import estimate, pair_features, variables
    from judgebias.metrics.survey import STRATIFIED, SampleDesign, wilson_design

    table, _ = import_pandalm(DATA / "pandalm")
    path = write_table(table, tmp_path / "pandalm.jsonl")
    monkeypatch.setenv("LABEL_STUDIO_URL", ls_server.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", ls_server.api_key)
    args = ["--judge", "pandalm-7b", "--self", "pandalm-7b=llama-7b"]
    res = CliRunner().invoke(app, ["annotate", "push", str(path), "--design", "uniform", "--budget", "12",
                                   "--project-title", "judgebias probability test", "--seed", "5", *args])
    assert res.exit_code == 0, res.output
    ledger = Ledger(tmp_path / "pandalm.labels.sqlite")
    draws = ledger.draws()
    big_n = len(draws)
    assert big_n == table["pair_id"].nunique() and draws["selected"].sum() == 12
    assert np.allclose(draws["pi"], 12 / big_n) and "drew 12" in res.output

    sdk = world["sdk"]
    users = [world["users"]["u1"], world["users"]["u2"], annotator(sdk, "annotator3")]
    truth = table.drop_duplicates("pair_id").set_index("pair_id")["human"]
    tasks = ledger.tasks().set_index("pair_id")
    drawn = sorted(draws.loc[draws["selected"], "pair_id"])
    # Two drawn pairs' tasks stay unlabelled (nonresponse). Twins (identical texts) share a task, so
    # a pair counts as labelled exactly when its task is: each task is annotated once.
    silent = set(tasks.loc[drawn[:2], "task_id"])
    labelled = [pid for pid in drawn if tasks.loc[pid, "task_id"] not in silent]
    given: dict[int, list[str]] = {}  # task -> the labels its annotators gave
    for pid in labelled:
        if tasks.loc[pid, "task_id"] in given:
            continue
        given[tasks.loc[pid, "task_id"]] = truth[pid]
        for user, lab in zip(users, truth[pid], strict=False):
            shown = SHOWN[lab][int(tasks.loc[pid, "swapped"])]
            sdk.annotations.create(id=int(tasks.loc[pid, "task_id"]), completed_by=user, result=[
                {"from_name": "preference", "to_name": "prompt", "type": "choices",
                 "value": {"choices": [shown]}}])
    res = CliRunner().invoke(app, ["annotate", "pull", str(path), "--no-mlflow", "--json", *args])
    assert res.exit_code == 0, res.output
    assert "agreement_human" in res.output and "Hájek" in res.output and "PPI++" in res.output
    summary = json.loads(res.output[res.output.index("\n{") + 1:])
    fig = summary["figures"]["pandalm-7b"]["estimates"]["agreement_human"]
    assert fig["labels"] == len(labelled) and fig["population_size"] == big_n

    # By hand: simple random sample of n labelled of N (the unlabelled drawn pairs are nonresponse), the
    # rate R = sum(hit) / sum(has majority), z = (hit - R m) / mean(m), V = (1 - n/N) var(z) / n,
    # then Wilson on n* = R(1 - R) / V scaled by (1.96 / t)^2, t on the design df: the pairs that
    # carry z (those with a majority; equal weights, one stratum) minus one.
    judge_rows = table[table["judge"] == "pandalm-7b"].set_index("pair_id")
    hit, m = [], []
    for pid in labelled:
        labs = given[tasks.loc[pid, "task_id"]]
        top = max(set(labs), key=labs.count)
        has = labs.count(top) * 2 > len(labs)
        m.append(float(has))
        hit.append(float(has and top == judge_rows.loc[pid, "verdict"]))
    hit, m = np.array(hit), np.array(m)
    n = len(labelled)
    rate = hit.sum() / m.sum()
    z = (hit - rate * m) / m.mean()
    se = math.sqrt((1 - n / big_n) * z.var(ddof=1) / n)
    lo, hi = wilson_design(rate, se, int(m.sum()), m.sum() - 1)
    got = fig["design_based"]
    assert (got["value"], got["ci_low"], got["ci_high"]) == (pytest.approx(rate), pytest.approx(lo, abs=1e-6),
                                                             pytest.approx(hi, abs=1e-6))
    # PPI++ with the gold panel (gpt-3.5) predicting the human label on all N pairs.
    only_drawn = table.assign(human=[h if p in labelled else [] for p, h in zip(table["pair_id"],
                                                                              table["human"], strict=True)])
    feats = pair_features(only_drawn, "pandalm-7b", self_map={"pandalm-7b": ["llama-7b"]})
    order = pd.Index(sorted(draws["pair_id"]))
    feats = feats.reindex(order)
    y, yhat = variables(feats, "agreement_human")
    design = SampleDesign(np.full(big_n, n / big_n), order.isin(labelled), STRATIFIED,
                          np.array(["all"] * big_n))
    want = estimate(y, yhat, "agreement_human", design)
    assert fig["ppi"]["value"] == pytest.approx(want.value)
    assert fig["ppi"]["ci_low"] == pytest.approx(want.ci_low)
    assert fig["ppi"]["ci_high"] == pytest.approx(want.ci_high)


def test_concurrent_pushes_make_one_project_and_lose_no_task(world, ls_server, tmp_path):
    """Two `annotate push` started at the same moment on one ledger (the fault that once made two
    same-titled projects, one never pulled): the ledger lock serialises them, so there is one project,
    two recorded batches, and every task on the server is in the ledger."""
    import subprocess
    import sys

    from conftest import DATA

    from judgebias.importers.pandalm import import_pandalm

    table, _ = import_pandalm(DATA / "pandalm")
    path = write_table(table, tmp_path / "race.jsonl")
    title = "judgebias concurrent push"
    env = {**os.environ, "LABEL_STUDIO_URL": ls_server.url, "LABEL_STUDIO_API_KEY": ls_server.api_key}
    cmd = [sys.executable, "-m", "judgebias", "annotate", "push", str(path), "--design", "uniform",
           "--budget", "4", "--project-title", title]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    sdk = world["sdk"]
    projects = [p for p in sdk.projects.list(title=title) if p.title == title]
    assert len(projects) == 1
    url = f"open it: {ls_server.url}/projects/{projects[0].id}/data"  # where the annotators work
    assert all(url in out for out in outputs), outputs
    ledger = Ledger(tmp_path / "race.labels.sqlite")
    on_server = {int(t.id) for t in sdk.tasks.list(project=projects[0].id)}
    assert set(ledger.tasks()["task_id"]) == on_server and len(on_server) == 8
    assert ledger.batches()["batch"].tolist() == [1, 2]


def test_pull_from_another_server_than_the_ledgers_says_so(world, ls_server, tmp_path):
    ledger = Ledger(tmp_path / "other.labels.sqlite")
    from judgebias.annotation.store import PushedTask

    ledger.record_tasks([PushedTask("pk-x", "s1", 1, 1, False, "http://127.0.0.1:1")])
    with pytest.raises(LabelStudioError, match=r"pushed to http://127\.0\.0\.1:1, not here"):
        world["client"].pull(ledger)
