"""`judgebias judge --mode pointwise` through a real `transformers serve` endpoint (SmolLM2): the
server returns no log-probabilities, so every score is the integer the judge wrote, counted as
parsed, or an exclusion with its reason; never a default."""

from __future__ import annotations

import json
import math

import pytest

from judgebias.engine.pointwise import PARSED_NO_LOGPROBS
from judgebias.tables.files import read_raw
from judgebias.tables.pointwise import validate_pointwise


@pytest.mark.slow
@pytest.mark.server
def test_pointwise_judge_through_transformers_serve(transformers_server, tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app

    src = tmp_path / "items.jsonl"
    rows = [
        dict(
            item_id="q1", prompt="What is the capital of France?", response="Paris.", generator="test-author"
        ),
        dict(item_id="q2", prompt="What is 2 + 2?", response="It is 5.", generator="test-author"),
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "scores.jsonl"
    args = [
        "judge",
        str(src),
        "--mode",
        "pointwise",
        "--backend",
        "openai",
        "--base-url",
        transformers_server["base_url"],
        "--judge",
        transformers_server["model"],
        "--name",
        "smollm2",
        "--out",
        str(out),
        "--max-new-tokens",
        "64",
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    table, _ = validate_pointwise(read_raw(out), source=str(out))
    assert list(table["item_id"]) == ["q1", "q2"] and set(table["judge"]) == {"smollm2"}
    for row in table.itertuples():
        assert row.score_dist is None  # no log-probabilities: no distribution is made up
        if row.judge_error:
            assert math.isnan(row.score)
        else:
            assert row.score_source == "parsed" and row.score == row.score_parsed and 1 <= row.score <= 10
    parsed = int((table["score_source"] == "parsed").sum())
    if parsed:
        assert f"{PARSED_NO_LOGPROBS}: {parsed}" in res.output
    again = CliRunner().invoke(app, args)
    assert "computed 0" in again.output, again.output
