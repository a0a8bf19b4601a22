"""Cost and time before and after a judging run (judgebias.backends.pricing, ``judgebias judge``'s
estimate, --max-cost and the table's judging record read by the leaderboard)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from judgebias.backends import pricing
from judgebias.backends.endpoint_usage import Price
from judgebias.backends.protocol import Prompt
from judgebias.bench.openai_stub import StubServer, StubState
from judgebias.config.experiment import bundled_file
from judgebias.tables.files import read_table, read_usage, usage_path


def test_prices_parse_and_match_by_longest_prefix(tmp_path):
    assert pricing.parse_price("2.5, 10") == Price(2.5, 10.0)
    for bad in ("2.5", "a,b", "-1,2", "1,2,3"):
        with pytest.raises(ValueError, match="IN,OUT"):
            pricing.parse_price(bad)
    assert pricing.price_for("gpt-4o-mini-2024-07-18") == ("gpt-4o-mini", Price(0.15, 0.60))
    assert pricing.price_for("gpt-4o-2024-08-06")[0] == "gpt-4o"
    assert pricing.price_for("my-local-judge") is None
    table = tmp_path / "prices.yaml"
    table.write_text("my-judge: [1.0, 2.0]\n")
    assert pricing.price_for("my-judge-v2", pricing.read_price_table(table)) == ("my-judge", Price(1.0, 2.0))
    table.write_text("my-judge: 3\n")
    with pytest.raises(ValueError, match=r"prices.yaml: 'my-judge' needs \[input, output\]"):
        pricing.read_price_table(table)


def test_prompt_tokens_without_a_tokenizer_are_four_characters_each():
    chat = Prompt.chat(("system", "x" * 8), ("user", "y" * 10))
    # ceil(8/4) + 3 + ceil(10/4) + 3 + 3 for the reply = 2 + 3 + 3 + 3 + 3 = 14
    assert pricing.count_prompt_tokens([chat, Prompt.raw("z" * 9)]) == [14, 3]  # ceil(9/4) = 3


def test_estimate_and_per_thousand_arithmetic():
    est = pricing.estimate([100, 300], 8, cached=5, counted_with="test",
                           price=("m", Price(2.0, 10.0)))
    # (400 * 2 + 16 * 10) / 1e6 = 0.00096
    assert (est.calls, est.cached, est.prompt_tokens, est.max_completion_tokens) == (2, 5, 400, 16)
    assert est.usd == pytest.approx(0.00096) and "2 calls to make (5 answered by the call" in est.text()
    assert pricing.estimate([1], 1, counted_with="x").usd is None
    # 4 judgments in 2 s costing $0.01: 500 s and $2.50 per 1,000; 1,000 prompt tokens -> 250,000
    per = pricing.per_thousand({"cost_usd": 0.01, "prompt_tokens": 1000, "completion_tokens": 8}, 4, 2.0)
    assert per == {"seconds_per_1000": 500.0, "usd_per_1000": pytest.approx(2.5),
                   "prompt_tokens_per_1000": 250_000.0, "completion_tokens_per_1000": 2000.0}
    assert pricing.per_thousand({"cost_usd": math.nan}, 1, 1.0)["usd_per_1000"] is None
    with pytest.raises(ValueError):
        pricing.per_thousand({}, 0, 1.0)


def _judge(table, out, url, *extra):
    return subprocess.run(
        [sys.executable, "-m", "judgebias", "judge", str(table), "--backend", "openai", "--base-url", url,
         "--judge", "gpt-4o-mini", "--out", str(out), *extra],
        capture_output=True, text=True, timeout=900, env={**os.environ, "OPENAI_API_KEY": "k"})


# PandaLM's first 200 rows (100 pairs of its 939, each judged by two judges; 5 repeat another pair
# byte for byte) rather than all 1,878: the same checks, repeats included, on a ninth of the calls.
FIRST_ROWS = {"pandalm_testset.parquet": 200}


@pytest.mark.parametrize("bundled", ["llmbar_natural.parquet", "pandalm_testset.parquet"])
def test_estimate_before_agrees_with_tokens_after(tmp_path, bundled):
    # The stub bills each prompt as a server of SmolLM2 would (its chat template's tokens); the
    # estimate counts with the same packaged tokenizer, before any call and without sending any.
    import pyarrow.parquet as pq

    table = bundled_file(bundled)
    if bundled in FIRST_ROWS:
        table = tmp_path / bundled
        pq.write_table(pq.read_table(bundled_file(bundled)).slice(0, FIRST_ROWS[bundled]), table)
    state = StubState(tokenizer="smollm2-135m-instruct")
    out = tmp_path / "judged.jsonl"
    with StubServer(state) as server:
        run = _judge(table, out, server.base_url, "--tokenizer", "smollm2-135m-instruct")
    assert run.returncode == 0, run.stderr
    record = read_usage(out)["judges"]["gpt-4o-mini"]
    est = record["estimate"]
    judged = len(read_table(out)[0])
    # Both orders of every pair, an identical item sent once (PandaLM repeats some pairs).
    assert est["calls"] == record["calls"] == state.summary()["accepted"] == 2 * judged - est["cached"]
    if bundled in FIRST_ROWS:  # the repeated pairs are in the rows kept: each sent once
        assert est["cached"] > 0, est
    assert abs(record["prompt_tokens"] - est["prompt_tokens"]) <= 0.05 * est["prompt_tokens"]
    assert record["prompt_tokens"] == state.summary()["prompt_tokens"]
    # The estimate bounds the answer at 8 tokens a call; the stub answers 1: an upper bound.
    assert record["usd"] <= est["usd"] and record["per_1000"]["usd_per_1000"] > 0
    assert f"{est['prompt_tokens']} prompt tokens (counted with the tokenizer" in run.stdout
    assert record["requests"]["concurrency"] == "adaptive" and state.summary()["answered_twice"] == 0


def test_max_cost_stops_before_sending_and_a_rerun_estimates_only_what_is_missing(tmp_path):
    table = tmp_path / "t.jsonl"
    table.write_text("".join(json.dumps({"pair_id": str(i), "prompt": f"q{i}" * 50, "response_a": "x" * 400,
                                         "response_b": "y" * 400}) + "\n" for i in range(6)))
    state = StubState()
    out = tmp_path / "o.jsonl"
    with StubServer(state) as server:
        refused = _judge(table, out, server.base_url, "--price-per-mtok", "1000,1000", "--max-cost", "0.01")
        assert refused.returncode == 1, refused.stderr
        assert "is above --max-cost $0.0100: nothing was sent" in refused.stderr
        assert state.summary()["accepted"] == 0 and not out.exists()
        unpriced = _judge(table, out, server.base_url, "--judge", "unlisted", "--max-cost", "1")
        assert unpriced.returncode == 2 and "--max-cost needs one" in " ".join(unpriced.stderr.split())
        first = _judge(table, out, server.base_url, "--price-per-mtok", "1,1")
        assert first.returncode == 0, first.stderr
        again = _judge(table, out, server.base_url, "--price-per-mtok", "1,1")
    assert "0 calls to make (12 answered by the call cache" in again.stdout
    assert state.summary()["accepted"] == 12  # the rerun sent nothing
    assert read_usage(out)["judges"]["gpt-4o-mini"]["cache_hits"] == 12
    assert usage_path(out).name == "o.jsonl.usage.json"


def test_recorded_timing_reaches_the_leaderboard_without_typing_it(tmp_path):
    import shutil

    from judgebias.cli.leaderboard import recorded_timing
    from judgebias.tables.files import write_usage

    table = tmp_path / "pandalm.parquet"
    shutil.copy(bundled_file("pandalm_testset.parquet"), table)
    per = {"seconds_per_1000": 42.0, "usd_per_1000": 0.25, "basis": "1878 calls made for 939 judgments"}
    write_usage(table, {"gpt-3.5-turbo": {"status": "finished", "recorded": "2026-11-27T10:00:00Z",
                                          "seconds": 39.4, "per_1000": per},
                        "pandalm-7b": {"status": "started", "estimate": {}}})  # never finished: left out
    timing = recorded_timing(read_usage(table))
    assert set(timing) == {"gpt-3.5-turbo"} and timing["gpt-3.5-turbo"]["usd_per_1000"] == 0.25
    out = tmp_path / "lb.json"
    run = subprocess.run([sys.executable, "-m", "judgebias", "leaderboard", str(table), "--reps", "20",
                          "--family", "pandalm-7b=llama-7b", "--out", str(out), "--no-mlflow"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    profile = json.loads(out.read_text())["recommendation"]["raters"]["gpt-3.5-turbo"]["profile"]
    assert profile["timing"]["seconds_per_1000"] == 42.0 and profile["timing"]["usd_per_1000"] == 0.25
    assert profile["timing"]["source"].startswith("recorded by judgebias judge at 2026-11-27T10:00:00Z")
    assert "42.0 s per 1,000 judgments (recorded by judgebias judge" in run.stdout
    usage_path(table).write_text("not json")
    bad = subprocess.run([sys.executable, "-m", "judgebias", "leaderboard", str(table), "--no-mlflow"],
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "pandalm.parquet.usage.json: not a judging record" in bad.stderr
