"""An OpenAI-compatible server timed beside the in-process engine (``judgebias bench --endpoint``).

What a user would otherwise run for P(A) from a local judge (llama.cpp's ``llama-server``,
llama-cpp-python, Ollama, vLLM, ``transformers serve``) gets the same prompts as the engine's rows,
through the project's own client (``OpenAICompatBackend``, no call cache). The row says how many
answers were log-probabilities, bounds (an option outside the server's top log-probs) or bare
verdicts, since only the first can be compared with the engine's P(A). With ``option_tokenizer`` a
vLLM server is asked for the option token ids (exact P(A), no bounds). The server's peak memory is
its process tree's (vLLM serves from an engine-core child process).
"""

from __future__ import annotations

import math
import time
from typing import Any
from urllib.parse import urlparse

from judgebias.bench.vllm import tree_peak_gib


def server_pid(base_url: str) -> int | None:
    """The PID of the local process listening on the URL's port, when there is one and this user
    may see it (psutil); None for a remote endpoint."""
    url = urlparse(base_url)
    if url.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        import psutil
    except ImportError:
        return None
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return conn.pid
    except (OSError, psutil.AccessDenied):
        return None
    return None


def bench_endpoint(prompts: list, options: tuple[str, ...], *, base_url: str, model: str,
                   concurrency: int = 1, pid: int | None = None, option_tokenizer: str | None = None
                   ) -> tuple[dict[str, Any], list[float]]:
    """Score ``prompts`` through the endpoint; (the row's figures, P(first) per prompt with NaN
    where the server gave no probability). ``concurrency`` 1 matches the engine's one process."""
    from judgebias.backends.openai_compat import OpenAICompatBackend
    from judgebias.engine.pairwise import shown_verdict

    backend = OpenAICompatBackend(model, base_url, name=f"endpoint {base_url}",
                                  concurrency=concurrency, max_tries=2, timeout_s=600,
                                  option_tokenizer=option_tokenizer)
    pid = pid if pid is not None else server_pid(base_url)
    # Warm-up (connection, the server's first call) on the last prompt, not the first: llama.cpp's
    # servers keep the previous prompt cached, and a warm-up equal to the first timed prompt made
    # that one nearly free (1 of 16 prompts in a 1k-token run).
    backend.score_options(prompts[-1:], options)
    warm_tokens = backend.usage_summary().get("prompt_tokens", 0)
    start = time.perf_counter()
    scores = backend.score_options(prompts, options)
    seconds = time.perf_counter() - start
    kinds = {"logprobs": 0, "bounded": 0, "verdict_only": 0, "failed": 0}
    p_first = []
    for s in scores:
        kind = ("failed" if s.error else "bounded" if s.bounds else "verdict_only" if s.verdict_only
                else "logprobs")
        kinds[kind] += 1
        p_first.append(s.probs[options[0]] if kind == "logprobs" else math.nan)
    usage = backend.usage_summary()
    # The server's own count of the timed prompts' tokens (its chat template included).
    reported = int(usage.get("prompt_tokens", 0) - warm_tokens)
    row = {"seconds": round(seconds, 3), "prompt_tokens_reported": reported,
           "answers": kinds, "server_pid": pid,
           "server_peak_memory_gib": tree_peak_gib(pid) if pid is not None else None,
           "option_token_ids": bool(option_tokenizer) and not backend._token_ids_ignored,
           "concurrency": concurrency, "endpoint": base_url, "endpoint_model": model}
    verdicts = [shown_verdict(s, *options[:2]) for s in scores]
    return {**row, "_verdicts": verdicts}, p_first

