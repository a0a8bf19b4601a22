"""The pointwise rating loop against a REAL Label Studio server: push a probability sample of items of
a pointwise table, post ratings through the API as two annotators would (a skip, a second rater, an
edit after a pull), pull through the CLI and check the figures against an independent computation."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from judgebias.annotation.server import find_label_studio
from judgebias.annotation.store import Ledger

pytestmark = [
    pytest.mark.server,
    pytest.mark.slow,
    pytest.mark.skipif(find_label_studio() is None and not os.environ.get("CI"),
                       reason="label-studio not installed (scripts/labelstudio_install.sh)"),
]

# Eight items rated 1..5 by judge j; j wrote i1-i4, m wrote i5-i8.
SCORES = [5.0, 4.0, 4.0, 3.0, 2.0, 3.0, 4.0, 1.0]


def pointwise_table() -> pd.DataFrame:
    return pd.DataFrame({
        "item_id": [f"i{k}" for k in range(1, 9)],
        "prompt": [f"question {k}" for k in range(1, 9)],
        "response": [f"answer {k} " + "word " * k for k in range(1, 9)],
        "generator": ["j"] * 4 + ["m"] * 4, "judge": "j", "score": SCORES,
        "scale_min": 1, "scale_max": 5, "criterion": "helpfulness", "human_scores": [[]] * 8,
    })


def _rate(sdk, task_id: int, user: int, rating: int | None) -> int:
    result = ([] if rating is None else
              [{"from_name": "rating", "to_name": "response", "type": "choices",
                "value": {"choices": [str(rating)]}}])
    return int(sdk.annotations.create(id=task_id, result=result, was_cancelled=rating is None,
                                      completed_by=user).id)


def test_push_rate_pull_recompute_against_real_server(ls_server, tmp_path, monkeypatch):
    from conftest import annotator

    from judgebias.annotation.ratings import RatingClient
    from judgebias.cli import app
    from judgebias.io import read_raw, write_table
    from judgebias.metrics.pointwise_survey import rating_estimate, rating_features
    from judgebias.metrics.survey import STRATIFIED, SampleDesign, t_quantile
    from judgebias.pointwise_table import validate_pointwise

    monkeypatch.setenv("LABEL_STUDIO_URL", ls_server.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", ls_server.api_key)
    table = write_table(pointwise_table(), tmp_path / "scores.jsonl")
    runner = CliRunner()
    title = "judgebias rating test"
    res = runner.invoke(app, ["annotate", "push", str(table), "--budget", "6", "--design", "uniform",
                              "--project-title", title, "--seed", "3"])
    assert res.exit_code == 0, res.output
    assert "6 rating task(s) created" in res.output
    ledger = Ledger(tmp_path / "scores.labels.sqlite")
    tasks = ledger.tasks().set_index("pair_id")
    assert len(tasks) == 6
    client = RatingClient(ls_server.settings, (1, 5))
    sdk = client._ls
    project = sdk.projects.get(id=int(tasks["project_id"].iloc[0]))
    assert "rating" in project.parsed_label_config
    assert [c for c in ("1", "2", "3", "4", "5") if f'value="{c}"' in project.label_config] == list("12345")
    # The task carries the item id, its inclusion probability and the judge's score in meta, and
    # nothing an annotator could read a score from in its data.
    first = sdk.tasks.get(id=int(tasks["task_id"].iloc[0]))
    unit = tasks.index[0]
    assert first.meta["item_id"] == unit and first.meta["pi"] == pytest.approx(6 / 8)
    assert first.meta["judge_scores"] == {"j": SCORES[int(unit[1:]) - 1]}
    assert set(first.data) == {"prompt", "response", "rubric", "pair_key"}
    assert "helpfulness" in first.data["rubric"] and "1 (worst) to 5 (best)" in first.data["rubric"]
    users = {"u1": sdk.users.whoami().id, "u2": annotator(sdk, "annotator2")}
    drawn = sorted(tasks.index, key=lambda u: int(u[1:]))
    # Ratings: a human score per drawn item, the first item rated by two annotators (4 and 2 -> 3),
    # the last one skipped (nonresponse), one edited after the first pull.
    truth = {u: 1 + (int(u[1:]) * 2) % 5 for u in drawn}
    ids = {}
    for u in drawn[:-1]:
        ids[u] = _rate(sdk, int(tasks.loc[u, "task_id"]), users["u1"], truth[u])
    _rate(sdk, int(tasks.loc[drawn[0], "task_id"]), users["u2"], 2)
    _rate(sdk, int(tasks.loc[drawn[-1], "task_id"]), users["u1"], None)
    res = runner.invoke(app, ["annotate", "pull", str(table), "--no-mlflow"])
    assert res.exit_code == 0, res.output
    assert "pulled: new 7, updated 0" in res.output
    edited = drawn[1]
    sdk.annotations.update(id=ids[edited], result=[{"from_name": "rating", "to_name": "response",
                                                    "type": "choices", "value": {"choices": ["5"]}}])
    truth[edited] = 5
    res = runner.invoke(app, ["annotate", "pull", str(table), "--no-mlflow", "--json"])
    assert res.exit_code == 0, res.output
    assert "updated 1" in res.output and "rated 5, pending 1" in res.output

    # The merged table: pulled ratings became human_scores.
    merged, _ = validate_pointwise(read_raw(tmp_path / "scores.human.jsonl"))
    hs = dict(zip(merged["item_id"], merged["human_scores"], strict=True))
    assert sorted(hs[drawn[0]]) == sorted([float(truth[drawn[0]]), 2.0])
    assert list(hs[edited]) == [5.0] and list(hs[drawn[-1]]) == []

    # Independent computation. Uniform draw of 6 of 8, one skip: 5 rated items, taken as a simple
    # random sample of 5 of 8 (the nonresponse adjustment), so Hájek is the plain mean with the
    # finite-population t interval: se = sqrt((1 - 5/8) s^2 / 5), df 4.
    figures = json.loads((tmp_path / "scores.ratings.figures.json").read_text())["j"]["estimates"]
    rated = drawn[:-1]
    h = np.array([np.mean(hs[u]) for u in rated])
    s = np.array([SCORES[int(u[1:]) - 1] for u in rated])
    own = np.array([int(u[1:]) <= 4 for u in rated])
    q = t_quantile(4.0)
    for name, values in (("human_mean", h), ("score_bias_human", s - h)):
        est = figures[name]["design_based"]
        se = np.sqrt((1 - 5 / 8) * values.var(ddof=1) / 5)
        assert est["value"] == pytest.approx(values.mean())
        m = values.mean()
        assert (est["ci_low"], est["ci_high"]) == pytest.approx((m - q * se, m + q * se))
        assert est["n"] == 5
    gap = (s - h)[own].mean() - (s - h)[~own].mean()
    assert figures["score_self_preference"]["design_based"]["value"] == pytest.approx(gap)
    # PPI++ as the pure estimator gives it on the same sample (the design rebuilt by hand).
    everything = pointwise_table().assign(human_scores=[list(hs[f"i{k}"]) for k in range(1, 9)])
    sampled = np.array([f"i{k}" in rated for k in range(1, 9)])
    design = SampleDesign(np.full(8, 5 / 8), sampled, STRATIFIED, np.array(["all"] * 8))
    ppi = rating_estimate(rating_features(everything, "j"), pd.Index([f"i{k}" for k in range(1, 9)]),
                          design, "human_mean", ppi=True)
    assert figures["human_mean"]["ppi"]["value"] == pytest.approx(ppi.value)
    assert figures["human_mean"]["ppi"]["ci_high"] == pytest.approx(ppi.ci_high)
