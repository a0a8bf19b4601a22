"""The child process that drives vLLM for ``judgebias.backends.vllm`` (run by the vLLM environment's
Python as a script, so it imports nothing from judgebias: vLLM pins transformers below the
project's and lives in its own environment).

Protocol: one JSON object per line. The first argument is a JSON object of engine settings; once
the engine is up the worker writes ``{"ready": true, ...}``, then answers each request line with
one reply line, in order, until stdin closes. Prompts arrive as token ids, so vLLM reads exactly
the tokens the in-process engine would (no second chat-template rendering). Logs go to stderr: the
original stdout is kept for the protocol alone.

Requests:
  {"op": "score", "prompts": [[ids]], "token_ids": [ids]}
      -> {"logprobs": [[logprob of each token id at the next position]]}: one prefill per prompt
      and ``max_tokens=1`` with ``logprob_token_ids`` (never ``prompt_logprobs``, which holds a
      vocabulary row per prompt token).
  {"op": "generate", "prompts": [[ids]], "max_tokens", "temperature", "top_p", "seed", "stop"}
      -> {"texts": [...], "n_tokens": [...]}
  {"op": "continuation", "prompts": [[ids]], "starts": [first continuation index]}
      -> {"logprobs": [[logprob of each continuation token]]} (``prompt_logprobs=0``: only the
      actual tokens; perplexity needs every continuation position).
Errors: {"error": "..."} for the request, the worker stays up.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import time


def _protocol_stream():
    """The real stdout for replies; fd 1 (and so vLLM's engine process) then writes to stderr."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def _prompts(token_lists):
    from vllm.inputs import TokensPrompt

    return [TokensPrompt(prompt_token_ids=list(ids)) for ids in token_lists]


def _score(llm, request):
    from vllm import SamplingParams

    token_ids = [int(t) for t in request["token_ids"]]
    params = SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=token_ids)
    outputs = llm.generate(_prompts(request["prompts"]), params, use_tqdm=False)
    rows = []
    for out in outputs:
        position = out.outputs[0].logprobs[0]  # {token id: Logprob} at the answer position
        missing = [t for t in token_ids if t not in position]
        if missing:
            raise RuntimeError(f"vLLM returned no log-probability for token ids {missing[:5]}")
        rows.append([float(position[t].logprob) for t in token_ids])
    return {"logprobs": rows}


def _generate(llm, request):
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=int(request["max_tokens"]), temperature=float(request["temperature"]),
                            top_p=float(request["top_p"]), seed=int(request["seed"]),
                            stop=list(request.get("stop") or []) or None)
    outputs = llm.generate(_prompts(request["prompts"]), params, use_tqdm=False)
    return {"texts": [o.outputs[0].text for o in outputs],
            "n_tokens": [len(o.outputs[0].token_ids) for o in outputs]}


def _continuation(llm, request):
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
    outputs = llm.generate(_prompts(request["prompts"]), params, use_tqdm=False)
    rows = []
    for out, ids, start in zip(outputs, request["prompts"], request["starts"], strict=True):
        per_position = out.prompt_logprobs  # None first, then {token id: Logprob} per prompt token
        rows.append([float(per_position[k][ids[k]].logprob) for k in range(start, len(ids))])
    return {"logprobs": rows}


OPERATIONS = {"score": _score, "generate": _generate, "continuation": _continuation}


def main() -> int:
    # Registered before vLLM is imported, so run after its exit handlers (the engine's shutdown):
    # the interpreter's teardown then skips garbage collections over what torch and vLLM leave.
    atexit.register(gc.freeze)
    settings = json.loads(sys.argv[1])
    replies = _protocol_stream()
    started = time.perf_counter()
    try:
        import vllm
        from vllm import LLM

        llm = LLM(model=settings["model"], tokenizer=settings["model"], dtype=settings["dtype"],
                  enable_prefix_caching=True, max_model_len=settings.get("max_model_len"),
                  seed=0, **settings.get("engine", {}))
    except Exception as exc:  # the parent shows this with the stderr tail
        replies.write(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return 1
    replies.write(json.dumps({"ready": True, "vllm_version": vllm.__version__,
                              "load_seconds": time.perf_counter() - started}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            reply = OPERATIONS[request["op"]](llm, request)
        except Exception as exc:  # one bad request must not take the engine down
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":  # vLLM starts its engine in a spawned process that re-imports this file
    sys.exit(main())
