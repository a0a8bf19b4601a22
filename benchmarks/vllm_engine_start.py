"""How long the vLLM backend's engine takes to start, compiled (vLLM's default) or eager.

    VLLM_CACHE_ROOT=$(mktemp -d) python benchmarks/vllm_engine_start.py compiled
    VLLM_CACHE_ROOT=$(mktemp -d) python benchmarks/vllm_engine_start.py eager

Prints one JSON line: the engine's start (the worker's own ``load_seconds``), the wall time to the
first 6 answers, and their P(A), so both modes can be checked against the fp32 engine. An empty
``VLLM_CACHE_ROOT`` makes the compiled start cold, as on a fresh CI machine. The engine shape is
tests/test_vllm_backend.py's (whose fixture starts eager since this measurement)."""

from __future__ import annotations

import json
import sys
import time

from judgebias.backends import vllm_backend
from judgebias.prompts import DBG_AB

QUERIES = [("What is 2+2?", "4", "5"), ("Name a primary color.", "Blue", "Pizza"),
           ("What is the capital of France?", "Paris", "Berlin")]


def main(mode: str) -> None:
    if mode not in ("compiled", "eager"):
        raise SystemExit("usage: vllm_engine_start.py compiled|eager")
    engine = {"max_num_batched_tokens": 2048, "max_num_seqs": 128, "enforce_eager": mode == "eager"}
    started = time.perf_counter()
    backend = vllm_backend.VLLMBackend("smollm2-135m-instruct", name="start", max_model_len=2048,
                                       engine=engine)
    prompts = [DBG_AB.build(q, a, b) for q, a, b in QUERIES] + [DBG_AB.build(q, b, a) for q, a, b in QUERIES]
    try:
        got = backend.score_options(prompts, ["A", "B"])
        print(json.dumps({"mode": mode, "engine_start_s": round(backend.load_seconds, 1),
                          "first_answers_s": round(time.perf_counter() - started, 1),
                          "p_a": [round(g.probs["A"], 6) for g in got]}))
    finally:
        backend.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
