"""A `judgebias judge` stopped half-way keeps every finished batch of model calls, and the rerun
computes only the rest: killed outright (SIGKILL, as the OOM killer or a lost machine does) or
interrupted (Ctrl-C), which also says what it kept."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA


def _cached_calls(cache_dir: Path) -> int:
    db = cache_dir / "calls.sqlite"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    except sqlite3.OperationalError:  # the table is not created yet
        return 0


@pytest.fixture
def table(tmp_path) -> Path:
    from judgebias.importers.pandalm import import_pandalm
    from judgebias.tables.files import write_table

    df = import_pandalm(DATA / "pandalm")[0]
    df = df[df["judge"] == df["judge"].iloc[0]]
    # The 6 shortest pairs (12 calls in 6 batches of 2, no two pairs alike): the stop lands after 2
    # batches with 4 still to go, so the rerun still has calls to compute; their texts are 10% of all
    # 26 pairs' (1,512 of 14,509 characters).
    chars = df["prompt"].str.len() + df["response_a"].str.len() + df["response_b"].str.len()
    return write_table(df.loc[chars.nsmallest(6).index], tmp_path / "pairs.jsonl")


def _judge(table: Path, out: Path, cache: Path) -> list[str]:
    return [sys.executable, "-m", "judgebias", "judge", str(table), "--judge", "smollm2-135m-instruct",
            "--out", str(out), "--batch-size", "2", "--cache-dir", str(cache), "--device", "cpu"]


def _stop_after_first_batches(cmd: list[str], cache: Path, sig: int) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600  # at load 15-25 on 2 cores, loading and 2 batches passed 240 s
        while _cached_calls(cache) < 4:
            assert proc.poll() is None, f"judge ended before any batch was kept: {proc.communicate()}"
            assert time.monotonic() < deadline, "no batch reached the cache in 600 s"
            time.sleep(0.2)
        proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:  # a failed wait must not leave the judge running for the rest of the suite
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc, _cached_calls(cache)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_stopped_judge_keeps_finished_batches_and_the_rerun_computes_only_the_rest(table, tmp_path, sig):
    cache, out = tmp_path / "cache", tmp_path / "judged.jsonl"
    proc, kept = _stop_after_first_batches(_judge(table, out, cache), cache, sig)
    stderr = proc.stderr.read()
    assert kept >= 4, f"kept {kept} calls"
    assert not out.exists(), "a stopped judge must not leave a partial table"
    if sig == signal.SIGINT:
        assert proc.returncode == 130
        assert "stopped: finished model calls" in stderr, stderr
    rerun = subprocess.run(_judge(table, out, cache), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    hits, computed = map(int, re.search(r"cache hits (\d+), computed (\d+)", rerun.stdout).groups())
    # Every kept call is answered by the cache; only the others reach the model. (PandaLM repeats
    # some pairs byte for byte: their prompts share one cache entry, so hits may exceed ``kept``.)
    assert computed == _cached_calls(cache) - kept > 0, rerun.stdout
    assert hits >= kept, rerun.stdout
