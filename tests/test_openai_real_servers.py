"""OpenAICompatBackend and the bench against real OpenAI-compatible servers.

* A real ``transformers serve`` over SmolLM2-135M-Instruct (dequantized from the packaged GGUF):
  returns no logprobs, so it exercises the verdict-only path; pairs are judged in both orders and
  folded with ``combine_orders`` (a verdict that flips with the order becomes a tie).
* llama.cpp's servers (llama-cpp-python's and the C++ ``llama-server``) on the packaged GGUFs beside
  the in-process engine (optional: each skips with the reason when it is not installed).
"""

from __future__ import annotations

import math
import os
import sys

import pandas as pd
import pytest
from conftest import free_port
from servers import running
from test_openai_server import judge_prompt

from judgebias.backends.call_cache import CachedBackend, ResponseCache
from judgebias.backends.openai_compat import OpenAICompatBackend
from judgebias.backends.protocol import GenerationParams, OptionScores, Prompt
from judgebias.tables.records import Judgment, Pair, combine_orders

# ------------------------------------------------------------------ real transformers serve


PAIRS = [Pair(pair_id=Pair.make_id(q, a, b), prompt=q, response_a=a, response_b=b)
         for q, a, b in [("What is 2+2?", "4", "5"),
                         ("Name a primary color.", "Blue", "Pizza"),
                         ("What is the capital of France?", "Paris", "Berlin")]]


def to_judgment(pair: Pair, order: str, s: OptionScores, judge: str) -> Judgment:
    # A verdict-only judge gives a verdict, not probabilities: p_* stay NaN (see combine_orders).
    verdict = None
    if s.error is None:
        verdict = "a" if s.probs["A"] > s.probs["B"] else "b" if s.probs["A"] < s.probs["B"] else "tie"
    return Judgment(pair_id=pair.pair_id, order=order, judge=judge, template_version="test-v1",
                    raw_output=s.raw, verdict_shown=verdict, error=s.error)


@pytest.mark.slow
@pytest.mark.server
def test_real_server_judges_pairs_in_both_orders(transformers_server, tmp_path):
    # 3 new tokens are room for "A" plus a newline; fewer tokens keep the test quick on 2 cores.
    inner = OpenAICompatBackend(transformers_server["model"], transformers_server["base_url"], name="smollm2",
                                concurrency=2, max_tries=2, backoff_s=0.2, timeout_s=60,
                                score_max_tokens=3)
    judge = CachedBackend(inner, ResponseCache(tmp_path / "cache"), template_version="test-v1")
    orders = ("ab", "ba")
    prompts = [judge_prompt(p.prompt, *p.shown(o)) for p in PAIRS for o in orders]
    scores = judge.score_options(prompts, ["A", "B"])
    assert inner.usage_summary()["calls"] == 6 and inner.usage_summary()["prompt_tokens"] > 6 * 40

    rows = []
    for k, pair in enumerate(PAIRS):
        judgments = [to_judgment(pair, o, scores[2 * k + j], "smollm2") for j, o in enumerate(orders)]
        for j in judgments:
            # logprobs were asked for and silently ignored: every answer is a verdict or a named failure
            s = scores[2 * k + orders.index(j.order)]
            assert s.verdict_only and (s.error is None or s.error.startswith("off-format"))
        rows.append((judgments, combine_orders(pair, judgments)))
    assert any(row["judge_error"] is None for _, row in rows), [r["raw_ab"] for _, r in rows]
    for (ab, ba), row in rows:
        assert math.isnan(row["p_a"])  # verdict-only: no averaged probability
        if row["judge_error"]:
            continue
        if ab.verdict_shown == ba.verdict_shown:  # same position both times: the verdict flipped
            assert row["verdict"] == "tie"
        else:
            assert row["verdict"] == ab.verdict
    print("\nSmolLM2 via transformers serve (ab, ba, combined):",
          [(r["verdict_ab"], r["verdict_ba"], r["verdict"]) for _, r in rows])

    # The same calls again: all from the cache, nothing sent.
    again = judge.score_options(prompts, ["A", "B"])
    ok = [i for i, s in enumerate(scores) if s.error is None]
    def seen(s):  # mass is NaN for verdicts, and NaN != NaN
        return s.probs, s.raw, s.verdict_only, s.error

    assert [seen(again[i]) for i in ok] == [seen(scores[i]) for i in ok]
    assert inner.usage_summary()["calls"] == 6 + (6 - len(ok))  # only failures are asked again


@pytest.mark.slow
@pytest.mark.server
def test_real_server_generates_and_has_no_prompt_logprobs(transformers_server):
    b = OpenAICompatBackend(transformers_server["model"], transformers_server["base_url"], max_tries=2)
    (gen,) = b.generate([Prompt.chat(("user", "Say hello."))], GenerationParams(max_new_tokens=4))
    assert gen.error is None and gen.text and gen.completion_tokens > 0 and gen.prompt_tokens > 0
    # Raw text (a base model's few-shot prompt) goes to /v1/completions with no chat template around
    # it: the server counts only the text's own tokens, where the chat request above had a template.
    (raw,) = b.generate([Prompt.raw("The capital of France is")], GenerationParams(max_new_tokens=2))
    assert raw.error is None and raw.text and 0 < raw.prompt_tokens < 10 < gen.prompt_tokens
    question = Prompt.raw("Is 2+2 equal to 4? Answer A for yes, B for no.\nAnswer:")
    (s,) = b.score_options([question], ["A", "B"])
    assert s.verdict_only  # this server ignores logprobs on completions too: a verdict or off-format
    (lp,) = b.continuation_logprobs([Prompt.raw("The capital of France is")], [" Paris"])
    assert lp.error and lp.error.startswith("endpoint does not return prompt logprobs") and lp.logprobs == ()


@pytest.mark.slow
@pytest.mark.server
def test_judge_cli_sends_fewshot_prompts_to_the_completions_route(transformers_server, tmp_path):
    # A served base model is judged with the DBG few-shot text (--prompt-kind few-shot), continued as
    # raw text: the template tag says so (that raw text takes the /completions route, with no chat
    # template counted, is checked in test_real_server_generates_and_has_no_prompt_logprobs).
    from typer.testing import CliRunner

    from judgebias.cli import app
    from judgebias.tables.files import read_table, write_table

    table = write_table(pd.DataFrame([p.__dict__ for p in PAIRS[:2]]), tmp_path / "pairs.jsonl")
    out = tmp_path / "judged.jsonl"
    args = ["judge", str(table), "--backend", "openai", "--base-url", transformers_server["base_url"],
            "--judge", transformers_server["model"], "--name", "served", "--prompt-kind", "few-shot",
            "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    judged, _ = read_table(out)
    assert len(judged) == 2 and set(judged["template_version"]) == {"dbg-ab@1:fewshot"}
    # transformers serve ignores logprobs: each order is a verdict (p_a NaN) or an off-format exclusion
    assert judged["p_a"].isna().all()
    errors = [e for e in judged["judge_error"] if isinstance(e, str)]
    assert all("off-format" in e for e in errors), errors
    assert "wrote" in result.output and "computed 4" in result.output


@pytest.mark.slow
@pytest.mark.server
def test_bench_times_a_real_server_beside_the_engine(transformers_server, monkeypatch):
    from judgebias.bench import throughput as bench
    monkeypatch.setattr(bench, "measured_cpu_peak_tflops", lambda dtype=None: 0.1)
    report = bench.run_benchmark(model="smollm2-135m-instruct", arch=None, n_pairs=2, prompt_tokens=0,
                                 explain_pairs=1, explain_tokens=4, modes=["batched"], device="cpu",
                                 token_budget=None, batch_size=8, endpoint=transformers_server["base_url"],
                                 endpoint_model=transformers_server["model"])
    row = report["modes"]["endpoint"]
    # transformers serve returns no log-probabilities: every answer is a bare verdict (or off-format),
    # so nothing enters max |dP(A)| and the agreement is over the verdicts it gave.
    assert row["answers"]["logprobs"] == 0 and row["answers"]["verdict_only"] + row["answers"]["failed"] == 4
    assert row["max_abs_p_diff"] is None and row["pairs"] == 2 and row["pairs_per_s"] > 0
    assert row["server_pid"] == transformers_server["pid"] and row["server_peak_memory_gib"] > 0.1
    engine = report["modes"]["batched"]
    assert row["batched_speedup"] == pytest.approx(engine["pairs_per_s"] / row["pairs_per_s"])
    table = bench.markdown(report)
    assert "| endpoint | server's |" in table and f"server process {transformers_server['pid']}" in table


def test_a_bounded_or_verdict_answer_still_has_a_shown_verdict():
    from judgebias.engine.pairwise import shown_verdict

    ab = ("A", "B")
    assert shown_verdict(OptionScores({"A": math.nan, "B": math.nan}, bounds={"A": [0.99, 1.0]}), *ab) == "a"
    assert shown_verdict(OptionScores({"A": math.nan, "B": math.nan}, bounds={"A": [0.0, 0.01]}), *ab) == "b"
    assert shown_verdict(OptionScores({"A": math.nan, "B": math.nan}, bounds={"A": [0.3, 1.0]}), *ab) is None
    assert shown_verdict(OptionScores({"A": 0.0, "B": 1.0}, verdict_only=True), *ab) == "b"
    assert shown_verdict(OptionScores({"A": math.nan, "B": math.nan}, error="off-format"), *ab) is None


# ------------------------------------------------------------------ llama.cpp's server (optional)


def _llamacpp_python() -> str | None:
    """A Python with llama-cpp-python's server: $JUDGEBIAS_LLAMACPP_PYTHON, else this one if it has it."""
    import importlib.util
    import subprocess

    exe = os.environ.get("JUDGEBIAS_LLAMACPP_PYTHON") or sys.executable
    if exe == sys.executable:
        return exe if importlib.util.find_spec("llama_cpp") else None
    probe = subprocess.run([exe, "-c", "import llama_cpp.server"], capture_output=True)
    return exe if probe.returncode == 0 else None


def _llama_server() -> str | None:
    """llama.cpp's C++ server: $JUDGEBIAS_LLAMA_SERVER, else ``llama-server`` on the PATH."""
    import shutil

    exe = os.environ.get("JUDGEBIAS_LLAMA_SERVER") or shutil.which("llama-server")
    return exe if exe and os.access(exe, os.X_OK) else None


def _server_argv(engine: str, gguf: str, port: int) -> list[str] | None:
    """The command that serves ``gguf`` as model "served" with 2 threads, or None when not installed."""
    if engine == "llama-cpp-python":
        exe = _llamacpp_python()
        return exe and [exe, "-m", "llama_cpp.server", "--model", gguf, "--model_alias", "served",
                        "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2", "--n_ctx", "2048"]
    exe = _llama_server()
    return exe and [exe, "-m", gguf, "--alias", "served", "--host", "127.0.0.1", "--port", str(port),
                    "-t", "2", "-c", "2048", "--parallel", "1"]


_NOT_INSTALLED = {
    "llama-cpp-python": "llama-cpp-python is not installed (an optional engine: `pip install "
                        "'llama-cpp-python[server]'`, or JUDGEBIAS_LLAMACPP_PYTHON=/path/to/its/python)",
    "llama-server": "llama.cpp's llama-server is not on the PATH (an optional engine: build it as "
                    "docs/benchmarks-history.md says, or JUDGEBIAS_LLAMA_SERVER=/path/to/llama-server)",
}


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.parametrize("engine", ["llama-cpp-python", "llama-server"])
@pytest.mark.parametrize("model", ["smollm2-135m-instruct", "gemma-3-270m"])
def test_bench_beside_llamacpp_server_on_the_packaged_gguf(engine, model, tmp_path, monkeypatch):
    # gemma-3-270m is a base model: its few-shot prompts go to /v1/completions.
    from judgebias.backends import loading as models
    from judgebias.bench import throughput as bench
    port = free_port()
    argv = _server_argv(engine, str(models.resolve(model).source), port)
    if argv is None:
        pytest.skip(_NOT_INSTALLED[engine])
    with running(argv, health_url=f"http://127.0.0.1:{port}/v1/models", log=tmp_path / "server.log",
                 what=engine) as proc:
        monkeypatch.setattr(bench, "measured_cpu_peak_tflops", lambda dtype=None: 0.1)
        report = bench.run_benchmark(model=model, arch=None, n_pairs=3, prompt_tokens=0,
                                     explain_pairs=1, explain_tokens=4, modes=["batched", "unbatched"],
                                     device="cpu", token_budget=None, batch_size=8,
                                     endpoint=f"http://127.0.0.1:{port}/v1", endpoint_model="served")
    row = report["modes"]["endpoint"]
    # llama.cpp returns top log-probs: every answer is a probability or, with an option outside its
    # top 20, a bound; the quantized weights (Q4_1, Q4_K_M) stay within a few hundredths of the fp32 engine.
    assert row["answers"]["logprobs"] + row["answers"]["bounded"] + row["answers"]["failed"] == 6
    assert row["answers"]["verdict_only"] == 0 and row["server_pid"] == proc.pid
    if model == "gemma-3-270m":  # raw text to /completions: A and B listed at every first token (48/48)
        assert row["answers"]["logprobs"] == 6
    if row["answers"]["logprobs"]:
        assert row["max_abs_p_diff_vs_reference"] < 0.1
