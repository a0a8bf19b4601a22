"""Odd inputs a user or a broken server gives: each ends in one line that says what is wrong, never a
traceback (each of these printed one: issue 45's fault-injection round)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PANDALM = ROOT / "judgebias" / "data" / "pandalm_testset.parquet"
FOUR_PAIRS = ROOT / "tests" / "data" / "local_judge" / "llmbar_mtbench_4.jsonl"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "judgebias", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def _says(done: subprocess.CompletedProcess, *words: str) -> str:
    """The command failed with no traceback, and its last line says ``words``."""
    assert done.returncode != 0, done.stdout[-1000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    for word in words:
        assert word in last, last
    return last


@pytest.fixture
def no_choices_endpoint():
    """An OpenAI-compatible endpoint whose every reply is HTTP 200 with ``choices: []``."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                               "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 0,
                                                        "total_tokens": 1}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_an_endpoint_reply_without_choices(no_choices_endpoint, tmp_path):
    done = _run("judge", str(FOUR_PAIRS), "--judge", "m", "--backend", "openai", "--base-url",
                no_choices_endpoint, "--out", str(tmp_path / "j.jsonl"), cwd=tmp_path)
    _says(done, no_choices_endpoint, "no choice (choices: [])")


def test_a_300_character_judge(tmp_path):
    done = _run("judge", str(FOUR_PAIRS), "--judge", "j" * 300, "--out", str(tmp_path / "j.jsonl"),
                cwd=tmp_path)
    _says(done, "unknown model", "(300 characters)")


def test_coverage_reps_beyond_memory(tmp_path):
    done = _run("coverage", "--reps", "1000000000000", "-f", "position_probs", "--n", "10", "--out",
                str(tmp_path / "cov"), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "--reps" in done.stderr


@pytest.mark.parametrize("args, words", [
    (["--budgets", "100000000000000000000"], ["100000000000000000000 is more labels than the 939 pairs"]),
    (["--budgets", "25,5000"], ["5000 is more labels than the 939 pairs"]),
    (["--figures", "nosuch"], ["unknown figure 'nosuch'", "eo"]),
])
def test_replay_budgets_and_figures_it_cannot_replay(tmp_path, args, words):
    done = _run("annotate", "replay", str(PANDALM), "-j", "pandalm-7b", "--reps", "2", "--out",
                str(tmp_path / "r"), *args, cwd=tmp_path)
    _says(done, *words)
    assert not (tmp_path / "r").exists()  # refused before anything is written


@pytest.mark.parametrize("args", [
    ["coverage", "--reps", "2", "-f", "position_probs", "--n", "10"],
    ["annotate", "replay", str(PANDALM), "-j", "pandalm-7b", "--reps", "2", "--budgets", "25"],
])
def test_out_naming_an_existing_file(tmp_path, args):
    (tmp_path / "taken").write_text("mine\n")
    done = _run(*args, "--out", str(tmp_path / "taken"), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "is a file; --out names a folder" in done.stderr
    assert (tmp_path / "taken").read_text() == "mine\n"


def test_report_on_deeply_nested_json(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"x":' * 5000 + "1" + "}" * 5000)
    _says(_run("report", str(deep), cwd=tmp_path), "not a readable metrics JSON")


def test_a_json_object_prompt(tmp_path):
    row = {"pair_id": "p1", "prompt": {"text": "hi"}, "response_a": "a", "response_b": "b",
           "generator_a": "g1", "generator_b": "g2", "judge": "j", "p_a": 0.3}
    table = tmp_path / "t.jsonl"
    table.write_text(json.dumps(row) + "\n")
    _says(_run("analyze", str(table), "--out", str(tmp_path / "m.json"), "--no-mlflow", cwd=tmp_path),
          "row 1, field 'prompt'", "is a dict, not text")
