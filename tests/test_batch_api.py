"""Judging through the Batch API (judgebias.backends.openai_batch) against the local stub that
implements OpenAI's files and batches endpoints: results, a kill and its rerun, a kill between
creating the batch and writing its id."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from judgebias.backends.call_cache import CachedBackend, ResponseCache
from judgebias.backends.openai_batch import STATE_FILE, BatchBackend
from judgebias.backends.openai_compat import OpenAICompatBackend
from judgebias.backends.protocol import Prompt
from judgebias.bench.openai_stub import StubServer, StubState


def prompts(n: int) -> list[Prompt]:
    return [Prompt.chat(("user", f"Question {i}: A or B?")) for i in range(n)]


def test_a_batch_answers_every_item_into_the_cache(tmp_path):
    state = StubState(tokenizer=None)
    with StubServer(state) as server:
        batch = BatchBackend(OpenAICompatBackend("gpt-4o-mini", server.base_url), tmp_path / "b", poll_s=0,
                             report=lambda text: None)
        cached = CachedBackend(batch, ResponseCache(tmp_path / "cache"))
        out = cached.score_options(prompts(5), ["A", "B"])
        fresh = BatchBackend(OpenAICompatBackend("gpt-4o-mini", server.base_url), tmp_path / "b")
        again = CachedBackend(fresh, ResponseCache(tmp_path / "cache")).score_options(prompts(5), ["A", "B"])
    assert all(s.error is None and s.probs["A"] > 0.5 for s in out) and again == out
    seen = state.summary()
    assert (seen["files_uploaded"], seen["batches_created"], seen["outputs_read"]) == (1, 1, 1)
    assert seen["distinct"] == 5 and seen["answered_twice"] == 0
    entry = next(iter(json.loads((tmp_path / "b" / STATE_FILE).read_text()).values()))
    assert entry["status"] == "read" and entry["items"] == 5
    # Tokens from the batch's answers are in the usage log like the synchronous route's.
    assert batch.usage_summary()["calls"] == 5
    with pytest.raises(ValueError, match="raw-text"):
        batch.score_options([Prompt.raw("few-shot text")], ["A", "B"])


def test_a_kill_between_creating_the_batch_and_writing_its_id_pays_once(tmp_path, monkeypatch):
    state = StubState()
    with StubServer(state) as server:
        first = BatchBackend(OpenAICompatBackend("m", server.base_url), tmp_path, poll_s=0)
        save = first._save
        calls = []

        def killed_after_the_upload(digest, entry):
            calls.append(entry)
            if "batch_id" in entry:
                raise KeyboardInterrupt  # the batch exists on the server; its id never reached the disk
            save(digest, entry)

        monkeypatch.setattr(first, "_save", killed_after_the_upload)
        with pytest.raises(KeyboardInterrupt):
            first.score_options(prompts(3), ["A", "B"])
        assert state.summary()["batches_created"] == 1
        rerun = BatchBackend(OpenAICompatBackend("m", server.base_url), tmp_path, poll_s=0)
        out = rerun.score_options(prompts(3), ["A", "B"])
    assert all(s.error is None for s in out)
    seen = state.summary()
    assert (seen["files_uploaded"], seen["batches_created"], seen["outputs_read"]) == (1, 1, 1)


def test_judge_killed_while_its_batch_runs_then_rerun_submits_one_batch(tmp_path):
    table = tmp_path / "t.jsonl"
    table.write_text("".join(json.dumps({"pair_id": str(i), "prompt": f"q{i}", "response_a": "x",
                                         "response_b": "y"}) + "\n" for i in range(4)))
    out = tmp_path / "o.jsonl"
    state_file = tmp_path / "o.jsonl.batch" / STATE_FILE
    state = StubState()
    state.batch_seconds = 3600.0  # not done before the kill
    env = {**os.environ, "OPENAI_API_KEY": "k", "JUDGEBIAS_CACHE_DIR": str(tmp_path / "cache")}
    with StubServer(state) as server:
        argv = [sys.executable, "-m", "judgebias", "judge", str(table), "--backend", "openai", "--base-url",
                server.base_url, "--judge", "gpt-4o-mini", "--batch-api", "--batch-poll", "0.2",
                "--out", str(out)]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        deadline = time.monotonic() + 300
        while not (state_file.exists() and "batch_id" in state_file.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert not out.exists() and state.summary()["batches_created"] == 1
        state.batch_seconds = 0.0  # the provider finishes the batch while no one is polling
        rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        assert rerun.returncode == 0, rerun.stderr
        assert "submitted before: polling it again" in rerun.stderr
        third = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        assert third.returncode == 0 and "0 calls to make (8 answered by the call cache" in third.stdout
    seen = state.summary()
    assert (seen["files_uploaded"], seen["batches_created"], seen["outputs_read"]) == (1, 1, 1)
    assert seen["distinct"] == 8 and seen["answered_twice"] == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all(r["p_a"] is not None for r in rows)
