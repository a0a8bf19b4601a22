"""Exact P(A) through a server that lists named token ids (vLLM's ``logprob_token_ids``), and
today's bounds kept where a server ignores or refuses the request, over the scripted socket."""

from __future__ import annotations

import math

import pytest
from test_openai_server import PROMPT, backend_for, payload, scripted  # noqa: F401 (fixture)

from judgebias.backends import option_token_ids as oti
from judgebias.backends.loading import load_tokenizer
from judgebias.backends.token_batching import option_variants

ALIAS = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def variants():
    return option_variants(load_tokenizer(ALIAS), ["A", "B"])


def vllm_reply(logprobs: dict[int, float], sampled: int) -> dict:
    """A chat completion as vLLM writes it with return_tokens_as_token_ids: the sampled token, then
    every requested id."""
    tops = [{"token": f"token_id:{sampled}", "logprob": logprobs[sampled]}]
    tops += [{"token": f"token_id:{t}", "logprob": lp} for t, lp in logprobs.items()]
    entry = {"token": f"token_id:{sampled}", "logprob": logprobs[sampled], "top_logprobs": tops}
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "A"},
                         "finish_reason": "length", "logprobs": {"content": [entry]}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 1, "total_tokens": 41}}


def test_request_asks_for_every_variant_at_one_token(variants):
    kwargs = {"model": "m", "messages": [], "max_tokens": 8, "logprobs": True, "top_logprobs": 20,
              "extra_body": {"continue_final_message": True}}
    out = oti.extend_request(kwargs, variants)
    assert out["max_tokens"] == 1 and out["logprobs"] is True and "top_logprobs" not in out
    assert out["extra_body"] == {"continue_final_message": True, "return_tokens_as_token_ids": True,
                                 "logprob_token_ids": variants["A"] + variants["B"]}
    assert kwargs["max_tokens"] == 8  # the caller's request is left as it was


def test_parse_sums_variants_even_far_below_the_top(variants):
    a1, a2 = variants["A"]
    b1, b2 = variants["B"]
    # P: A=0.5 + 0.1, B=1e-9 + 0 (floored at -9999): P(A) = 0.6 / (0.6 + 1e-9)
    lps = {a1: math.log(0.5), a2: math.log(0.1), b1: math.log(1e-9), b2: -9999.0}
    got = oti.parse(vllm_reply(lps, a1), variants)
    assert got is not None and not got.bounds and got.error is None
    assert got.probs["A"] == pytest.approx(0.6 / (0.6 + 1e-9), rel=1e-12)
    assert got.mass == pytest.approx(0.6 + 1e-9, rel=1e-12)


def test_completions_route_asks_and_reads_the_same_ids(variants):
    # vLLM 0.32's /completions: `logprobs` is a number (ignored once ids are named) and the reply
    # lists {"token_id:N": logprob} per generated token (completion/serving.py, _create_completion_logprobs).
    kwargs = {"model": "m", "prompt": "Q: ...\nA:", "max_tokens": 8, "logprobs": 20}
    out = oti.extend_request(kwargs, variants)
    ids = variants["A"] + variants["B"]
    assert out["max_tokens"] == 1 and out["logprobs"] == len(ids) and "messages" not in out
    assert out["extra_body"] == {"return_tokens_as_token_ids": True, "logprob_token_ids": ids}
    a1, a2 = variants["A"]
    b1, b2 = variants["B"]
    # P: A = 0.3 + 0.1, B = 0.2 + 0 (floored): P(A) = 0.4 / 0.6
    lps = {a1: math.log(0.3), a2: math.log(0.1), b1: math.log(0.2), b2: -9999.0}
    tops = {f"token_id:{t}": lp for t, lp in lps.items()}
    listed = {"tokens": [f"token_id:{a1}"], "token_logprobs": [lps[a1]], "top_logprobs": [tops],
              "text_offset": [0]}
    reply = {"choices": [{"index": 0, "text": " A", "logprobs": listed}]}
    got = oti.parse(reply, variants)
    assert got is not None and got.raw == " A" and got.probs["A"] == pytest.approx(0.4 / 0.6, rel=1e-12)
    del tops[f"token_id:{b2}"]
    assert oti.parse(reply, variants) is None  # an id missing: the server did not honour it


def test_parse_says_none_when_ids_are_not_listed(variants):
    assert oti.parse(payload("synthetic_B_outside_top"), variants) is None  # a server that ignored it
    a1 = variants["A"][0]
    assert oti.parse(vllm_reply({a1: -0.1}, a1), variants) is None  # some ids missing


def test_backend_gets_exact_probabilities_from_a_vllm_like_server(scripted, variants):  # noqa: F811
    a1, a2 = variants["A"]
    b1, b2 = variants["B"]
    lps = {a1: math.log(0.7), a2: math.log(0.05), b1: math.log(0.2), b2: math.log(0.01)}
    scripted.default = (200, vllm_reply(lps, a1), {})
    backend = backend_for(scripted, option_tokenizer=ALIAS, concurrency=1)
    out = backend.score_options([PROMPT], ["A", "B"])
    assert out[0].probs["A"] == pytest.approx(0.75 / 0.96) and not out[0].bounds
    sent = scripted.requests[0]
    assert sent["max_tokens"] == 1 and sent["logprob_token_ids"] == [a1, a2, b1, b2]
    assert sent["return_tokens_as_token_ids"] is True
    assert backend.identity()["scoring"]["option_token_ids"] == ALIAS
    plain = backend_for(scripted)
    assert "option_token_ids" not in plain.identity()["scoring"]  # unchanged keys when not asked for


def test_a_server_that_ignores_the_ids_keeps_todays_bounds(scripted, variants):  # noqa: F811
    scripted.default = (200, payload("synthetic_B_outside_top"), {})
    backend = backend_for(scripted, option_tokenizer=ALIAS, concurrency=1)
    out = backend.score_options([PROMPT, PROMPT], ["A", "B"])
    assert all(math.isnan(s.probs["A"]) and s.bounds for s in out)  # a bound, as without the option
    # Detected once: the first prompt asked twice, the second only the usual way.
    asked = ["logprob_token_ids" in r for r in scripted.requests]
    assert asked == [True, False, False]


def test_a_server_that_refuses_the_ids_is_asked_the_usual_way(scripted, variants):  # noqa: F811
    scripted.then(400, {"error": {"message": "Unrecognized request argument: logprob_token_ids"}})
    scripted.default = (200, payload("synthetic_A_top"), {})
    backend = backend_for(scripted, option_tokenizer=ALIAS, concurrency=1)
    out = backend.score_options([PROMPT], ["A", "B"])
    assert out[0].error is None and not out[0].verdict_only  # log-probs still used, not given up
    assert ["logprob_token_ids" in r for r in scripted.requests] == [True, False]
    assert scripted.requests[1]["logprobs"] is True


def test_the_spec_carries_the_option_tokenizer_to_the_backend():
    from judgebias.backends.builder import ModelSpec, build_backend

    spec = ModelSpec(name="j", model="m", backend="openai", base_url="http://127.0.0.1:9/v1",
                     option_tokenizer=ALIAS)
    assert build_backend(spec).option_tokenizer == ALIAS and ALIAS in spec.model_key()
    plain = ModelSpec(name="j", model="m", backend="openai", base_url="http://127.0.0.1:9/v1")
    assert "option_tokenizer" not in plain.model_key()  # chunk ids of existing specs unchanged
    with pytest.raises(ValueError, match="only applies to backend 'openai'"):
        ModelSpec(name="j", model=ALIAS, backend="vllm", option_tokenizer=ALIAS)


def test_a_config_entry_sets_the_option_tokenizer():
    from judgebias.config.experiment import JudgeConfig

    ref = JudgeConfig(name="j", model="m", backend="openai", base_url="http://127.0.0.1:9/v1",
                      option_tokenizer=ALIAS)
    assert ref.to_spec().option_tokenizer == ALIAS
    assert JudgeConfig(name="j", model=ALIAS, backend="vllm").to_spec().backend == "vllm"
    with pytest.raises(ValueError, match="only applies to backend 'openai'"):
        JudgeConfig(name="j", model=ALIAS, option_tokenizer=ALIAS)
