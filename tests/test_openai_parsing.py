"""Request building and response parsing for OpenAI-compatible endpoints, on recorded payloads.

Payloads: tests/data/openai_payloads/ (README there: real GPT-4-Turbo logprob choices from
alpaca_eval, real transformers-serve responses, and synthetic ones in the documented format).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from judgebias.backends.completions_requests import build_echo_request, route
from judgebias.backends.openai_parsing import (
    NO_PROMPT_LOGPROBS,
    build_chat_request,
    build_generate_request,
    build_score_request,
    chat_messages,
    logprob_entries,
    option_normalizer,
    parse_echo_logprobs,
    parse_generation,
    parse_option_scores,
    parse_verdict_text,
    strip_think,
)
from judgebias.backends.protocol import GenerationParams, Prompt

PAYLOADS = Path(__file__).parent / "data" / "openai_payloads"
e = math.exp


def load(name: str) -> dict:
    return json.loads((PAYLOADS / f"{name}.json").read_text())


# ------------------------------------------------------------------ real GPT-4-Turbo payloads


@pytest.mark.parametrize("name", ["alpaca_eval_M_top_quoted_variant", "alpaca_eval_m_top",
                                  "alpaca_eval_close_call", "alpaca_eval_m_top_space_variant",
                                  "alpaca_eval_neither_top"])
def test_real_alpaca_eval_logprobs_reproduce_its_preference(name):
    payload = load(name)
    scores = parse_option_scores(payload, ["M", "m"])
    assert scores.error is None and not scores.verdict_only
    # alpaca_eval: preference = 1 + P(m) / (P(m) + P(M)) for the order it showed the outputs in; it
    # randomized that order and stored the preference un-flipped, so P(m) is pref-1 or 2-pref.
    # Variant tokens (' m', '"M') add < 1e-7 that alpaca_eval's exact-token parser leaves out.
    pref = payload["x_source"]["preference"]
    assert min(abs(scores.probs["m"] - (pref - 1)), abs(scores.probs["m"] - (2 - pref))) < 1e-6
    assert scores.probs["m"] + scores.probs["M"] == pytest.approx(1.0)


def test_real_close_call_hand_computed():
    scores = parse_option_scores(load("alpaca_eval_close_call"), ["M", "m"])
    # top-5: m -0.61807424, M -0.77432424 -> P(m) = 1 / (1 + e^(-0.15625)) = 0.538983
    assert scores.probs["m"] == pytest.approx(1 / (1 + e(-0.15625)), abs=1e-9)
    assert scores.mass == pytest.approx(e(-0.61807424) + e(-0.77432424))
    assert scores.raw == "M"  # the sampled text disagrees with the argmax; the scores do not care


def test_real_neither_top_still_scores_the_options():
    scores = parse_option_scores(load("alpaca_eval_neither_top"), ["M", "m"])
    # first token "Neither"; M -0.6359396, m -1.6671896 among the top-5
    assert scores.probs["M"] == pytest.approx(e(-0.6359396) / (e(-0.6359396) + e(-1.6671896)))
    assert scores.mass < 0.75  # a quarter of the mass went to "Neither": visibly less on-format


def test_case_is_kept_when_it_separates_the_options():
    assert option_normalizer(["M", "m"]) == (False, {"M": "M", "m": "m"})
    assert option_normalizer(["A", "B"]) == (True, {"A": "a", "B": "b"})
    with pytest.raises(ValueError, match="not distinct"):
        option_normalizer(["A", "(A)"])
    with pytest.raises(ValueError, match="at least two"):
        option_normalizer(["A"])


# ------------------------------------------------------------------ synthetic logprob payloads


def test_A_top_sums_variants():
    s = parse_option_scores(load("synthetic_A_top"), ["A", "B"])
    p_a, p_b = e(-0.105) + e(-4.6), e(-2.408)  # "A" + " A"; "B"  (= 0.91038, 0.09001)
    assert s.probs["A"] == pytest.approx(p_a / (p_a + p_b)) and s.mass == pytest.approx(p_a + p_b)
    assert s.probs["A"] == pytest.approx(0.91004, abs=1e-5)


def test_space_B_top():
    s = parse_option_scores(load("synthetic_space_B_top"), ["A", "B"])
    p_b, p_a = e(-0.223) + e(-3.0), e(-1.609)  # " B" + "B"; " A"  -> P(B) = 0.84990 / 1.05000
    assert s.probs["B"] == pytest.approx(p_b / (p_a + p_b))
    assert s.probs["B"] == pytest.approx(0.80943, abs=1e-5)
    assert s.error is None


def test_neither_option_in_top_logprobs_is_nan_with_error():
    s = parse_option_scores(load("synthetic_both_absent"), ["A", "B"])
    assert all(math.isnan(p) for p in s.probs.values())
    assert "neither of ['A', 'B']" in s.error and "'Both'" in s.error
    assert s.raw.startswith("Both responses")


def test_formatting_tokens_are_skipped_to_the_answer():
    s = parse_option_scores(load("synthetic_prefix_bracket_B"), ["A", "B"])
    # answer token is "B" (after "[["): B -0.01, A -4.7 -> 0.99005 / (0.99005 + 0.00910)
    assert s.probs["B"] == pytest.approx(e(-0.01) / (e(-0.01) + e(-4.7)))


def test_reasoning_model_answer_after_think_block():
    s = parse_option_scores(load("synthetic_reasoning_think_logprobs"), ["A", "B"])
    # the " A" inside <think> must not count; the answer "A": A -0.05, B -3.0 -> 0.95026
    assert s.probs["A"] == pytest.approx(e(-0.05) / (e(-0.05) + e(-3.0)))
    assert s.probs["A"] == pytest.approx(0.95026, abs=1e-5)


def test_answer_after_marker():
    payload = load("synthetic_prefix_bracket_B")
    assert parse_option_scores(payload, ["A", "B"], answer_after="[[").probs["B"] > 0.99
    # After the last "]]" nothing is left: an explicit, named failure, not a guess.
    s = parse_option_scores(payload, ["A", "B"], answer_after="]]")
    assert math.isnan(s.probs["A"]) and "no answer token" in s.error


# ------------------------------------------------------------------ verdict-only payloads


def test_real_transformers_serve_payload_is_verdict_only():
    payload = load("transformers_serve_chat_verdict_only")
    assert payload["choices"][0]["logprobs"] is None
    s = parse_option_scores(payload, ["A", "B"])
    assert s.verdict_only and s.probs == {"A": 1.0, "B": 0.0} and s.error is None
    assert s.raw.startswith("A\n\nBoth")


@pytest.mark.parametrize("name, probs", [
    ("synthetic_reasoning_think_verdict_only", {"A": 1.0, "B": 0.0}),  # the "B" inside <think> ignored
    ("synthetic_explain_first_verdict_only", {"A": 0.0, "B": 1.0}),
    ("synthetic_explain_first_tie_verdict_only", {"A": 0.5, "B": 0.5}),
])
def test_verdict_only_payloads(name, probs):
    s = parse_option_scores(load(name), ["A", "B"])
    assert s.error is None and s.verdict_only and s.probs == probs


@pytest.mark.parametrize("name, reason", [
    ("synthetic_off_format_text_verdict_only", "no verdict among ['A', 'B']"),
    ("synthetic_think_cut_off_verdict_only", "unterminated <think>"),
])
def test_off_format_verdicts_are_errors(name, reason):
    s = parse_option_scores(load(name), ["A", "B"])
    assert reason in s.error and all(math.isnan(p) for p in s.probs.values())


@pytest.mark.parametrize("text, verdict", [
    ("A", "A"), (" b ", "B"), ("(A)", "A"), ("**B**", "B"), ("A.\nBecause it is right.", "A"),
    ("A]]", "A"), ("[[B", "B"), ("Verdict: [[ B ]]", "B"), ("[[C]]", "tie"),
    ("A good answer would mention units.", None), ("", None), ("Both.", None),
    ("[[A]] is better than [[B]]", None),  # conflicting verdicts: refuse to pick one
])
def test_verdict_text_forms(text, verdict):
    s = parse_verdict_text(text, ["A", "B"])
    if verdict is None:
        assert s.error and s.error.startswith("off-format")
    elif verdict == "tie":
        assert s.probs == {"A": 0.5, "B": 0.5}
    else:
        assert s.probs[verdict] == 1.0 and s.error is None


def test_verdict_with_numeric_options_and_real_option_C():
    assert parse_verdict_text("[[2]]", ["1", "2"]).probs == {"1": 0.0, "2": 1.0}
    # When "C" is itself an option it is chosen, not read as a tie.
    assert parse_verdict_text("[[C]]", ["A", "B", "C"]).probs == {"A": 0.0, "B": 0.0, "C": 1.0}
    assert parse_verdict_text("[[C]]", ["A", "B"], tie_label=None).error


def test_strip_think():
    assert strip_think("<think>x</think>A<think>y</think>") == ("A", None)
    assert strip_think("A")[0] == "A" and strip_think("<think>unfinished")[1]


# ------------------------------------------------------------------ generation and echo


def test_parse_generation_usage():
    g = parse_generation(load("transformers_serve_chat_verdict_only"), seconds=0.5)
    assert (g.prompt_tokens, g.completion_tokens, g.seconds) == (67, 8, 0.5) and g.error is None
    refused = load("synthetic_A_top")
    refused["choices"][0]["finish_reason"] = "content_filter"
    assert "content_filter" in parse_generation(refused).error


def test_echo_logprobs_pick_the_continuation_tokens():
    payload = load("synthetic_completions_echo")
    assert parse_echo_logprobs(payload, "The capital of France is", " Paris").logprobs == (-0.4,)
    # " Paris" straddles a context that ends in a space: it is the continuation's token.
    assert parse_echo_logprobs(payload, "The capital of France is ", "Paris").logprobs == (-0.4,)
    t = parse_echo_logprobs(payload, "The capital", " of France is Paris")
    assert t.logprobs == (-1.2, -3.3, -0.9, -0.4) and t.perplexity == pytest.approx(e(5.8 / 4))
    assert "first token" in parse_echo_logprobs(payload, "", "The capital").error


def test_completions_endpoint_logprobs_of_a_fewshot_prompt():
    # Real llama-cpp-python server, packaged gemma-3-270m (base) GGUF, a DBG few-shot prompt sent as
    # raw text to /v1/completions with logprobs=20. The legacy form: parallel token lists and one
    # {token: logprob} dict per generated token. At the first token the top is C -1.0792, A -1.4266,
    # D -1.9119, B -2.3690, ..., a -4.3557: P(A) = (e^-1.4266 + e^-4.3557) / (that + e^-2.3690)
    # = (0.2401 + 0.0128) / (0.2529 + 0.0936) = 0.730, mass 0.346 (the base model likes "C").
    s = parse_option_scores(load("llamacpp_server_completions_fewshot"), ["A", "B"])
    assert s.error is None and not s.verdict_only and not s.bounds
    a, lower_a, b = math.exp(-1.4265559911727905), math.exp(-4.355), math.exp(-2.3689637184143066)
    assert s.probs["A"] == pytest.approx((a + lower_a) / (a + lower_a + b), abs=1e-4)
    assert s.probs["A"] == pytest.approx(0.730, abs=5e-4) and s.mass == pytest.approx(0.3465, abs=5e-4)
    assert s.raw.startswith("C\n\n# Query")


def test_a_leading_formatting_token_that_listed_the_options_is_where_the_answer_is_read():
    # Real llama-cpp-python response, gemma-3-270m Q4_K_M, a ~1k-token few-shot prompt: the base
    # model writes "<Response A>...". At "<" (formatting) the top 20 hold A -1.9050, B -2.8795 and
    # a -4.0759: P(A) = (0.14883 + 0.01698) / (0.16581 + 0.05615) = 0.747, what a local judge reads
    # at that position. The first non-formatting token, "Response", lists "a" but not B: reading
    # there gave a bound, P(A) in [0.69, 1], for all 15 such answers of the bench run.
    s = parse_option_scores(load("llamacpp_server_completions_fewshot_lt_first"), ["A", "B"])
    assert s.error is None and not s.bounds and s.raw.startswith("<Response A>")
    assert s.probs["A"] == pytest.approx(0.747, abs=5e-4) and s.mass == pytest.approx(0.2220, abs=5e-4)


def _content(*positions):
    return {"choices": [{"message": {"content": "".join(t for t, _ in positions)}, "logprobs": {"content": [
        {"token": t, "logprob": tops[0][1], "top_logprobs": [{"token": k, "logprob": v} for k, v in tops]}
        for t, tops in positions]}}]}


def test_candidate_positions_prefer_one_listing_every_option():
    # "**" lists A only; "A" lists both: the value at "A" (e^-0.1 / (e^-0.1 + e^-3) = 0.948), not a bound.
    both = _content(("**", [("**", -0.05), ("A", -4.0)]), ("A", [("A", -0.1), ("B", -3.0)]))
    s = parse_option_scores(both, ["A", "B"])
    assert not s.bounds and s.probs["A"] == pytest.approx(math.exp(-0.1) / (math.exp(-0.1) + math.exp(-3)))
    # Nowhere both: the first position listing one gives the bound.
    one = _content(("**", [("**", -0.05), ("B", -4.0)]), ("A", [("A", -0.1), ("C", -3.0)]))
    assert parse_option_scores(one, ["A", "B"]).bounds["B"][0] > 0.0
    # A whitespace token is layout, not an answer: its listed options are not read.
    newline = _content(("\n\n", [("\n\n", -0.01), ("B", -6.0), ("A", -7.0)]),
                       ("A", [("A", -0.2), ("B", -2.0)]))
    assert parse_option_scores(newline, ["A", "B"]).probs["A"] == pytest.approx(
        math.exp(-0.2) / (math.exp(-0.2) + math.exp(-2.0)))


def test_logprob_entries_read_both_forms():
    chat = {"content": [{"token": "A", "logprob": -0.1, "top_logprobs": []}]}
    assert logprob_entries(chat) == chat["content"]
    legacy = {"tokens": ["The", " A"], "token_logprobs": [None, -0.5],
              "top_logprobs": [None, {" A": -0.5, " B": -1.0}], "text_offset": [0, 3]}
    assert logprob_entries(legacy) == [
        {"token": "The", "logprob": None, "top_logprobs": []},
        {"token": " A", "logprob": -0.5, "top_logprobs": [{"token": " A", "logprob": -0.5},
                                                          {"token": " B", "logprob": -1.0}]}]
    assert logprob_entries(None) == [] and logprob_entries({"tokens": []}) == []


def test_real_server_without_prompt_logprobs_is_an_error_not_a_value():
    t = parse_echo_logprobs(load("transformers_serve_completions_echo_ignored"), "The capital of France is",
                            " Paris")
    assert t.error == NO_PROMPT_LOGPROBS and t.logprobs == ()


# ------------------------------------------------------------------ request building


def test_raw_prompt_becomes_one_user_message():
    assert chat_messages(Prompt.raw("Q: 2+2?\nA:")) == [{"role": "user", "content": "Q: 2+2?\nA:"}]


def test_raw_text_goes_to_the_completions_endpoint():
    # A base model's few-shot prompt is continued as text; the assistant prefix ends that text.
    p = Prompt.raw("# Query\n2+2?\n\n# Better response\n", assistant_prefix="[[")
    assert route(p) == "completions" and route(Prompt.chat(("user", "x"))) == "chat"
    kw = build_score_request("gemma", p, prefix_mode="continue", max_tokens_field="max_completion_tokens")
    assert kw == {"model": "gemma", "prompt": "# Query\n2+2?\n\n# Better response\n[[", "max_tokens": 8,
                  "temperature": 0.0, "top_p": 1.0, "logprobs": 20}
    assert "logprobs" not in build_score_request("gemma", p, logprobs=False)
    kw = build_generate_request("gemma", p, GenerationParams(max_new_tokens=4, seed=2, stop=("# Query",)))
    assert (kw["prompt"], kw["max_tokens"], kw["seed"], kw["stop"]) == (p.text + "[[", 4, 2, ["# Query"])
    assert "messages" not in kw


def test_score_request_fields():
    p = Prompt.chat(("system", "judge"), ("user", "which?"))
    kw = build_score_request("gpt-4o-mini", p)
    assert kw == {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "judge"},
                                                       {"role": "user", "content": "which?"}],
                  "max_tokens": 8, "temperature": 0.0, "top_p": 1.0, "logprobs": True, "top_logprobs": 20}
    kw = build_score_request("o3-mini", p, logprobs=False, max_tokens_field="max_completion_tokens")
    assert "logprobs" not in kw and kw["max_completion_tokens"] == 8 and "max_tokens" not in kw


def test_assistant_prefix_modes():
    p = Prompt.chat(("user", "which?"), assistant_prefix="[[")
    assert len(build_score_request("m", p)["messages"]) == 1  # "none": not sent, the parser copes
    kw = build_score_request("m", p, prefix_mode="message")
    assert kw["messages"][-1] == {"role": "assistant", "content": "[["} and "extra_body" not in kw
    kw = build_score_request("m", p, prefix_mode="continue")
    assert kw["extra_body"] == {"continue_final_message": True, "add_generation_prompt": False}
    with pytest.raises(ValueError, match="prefix_mode"):
        build_chat_request("m", p, max_tokens=1, prefix_mode="prefill")


def test_generate_and_echo_requests():
    params = GenerationParams(max_new_tokens=32, temperature=0.7, top_p=0.9, seed=5, stop=("\n",))
    kw = build_generate_request("m", Prompt.chat(("user", "hi")), params)
    got = (kw["max_tokens"], kw["temperature"], kw["top_p"], kw["seed"], kw["stop"])
    assert got == (32, 0.7, 0.9, 5, ["\n"])
    kw = build_echo_request("davinci-002", Prompt.raw("The capital of France is"), " Paris")
    assert kw["prompt"] == "The capital of France is Paris" and kw["echo"] is True and kw["logprobs"] == 1
    with pytest.raises(ValueError, match="raw text"):
        build_echo_request("m", Prompt.chat(("user", "x")), "y")


def test_an_option_outside_the_top_logprobs_gives_bounds_not_one():
    # llama.cpp-style top-5 at the answer: A -0.0222, The -4.61, ** -5.3, " A" -6.2, I -6.9; no B.
    # listed sum = 0.996025, smallest listed e^-6.9 = 0.0010078, unlisted 1 - 0.996025 = 0.0039748,
    # so P(B token) <= u = min(0.0010078, 0.0039748) = 0.0010078; m_A = e^-0.0222 + e^-6.2 = 0.98007.
    # P(A) in [m_A / (m_A + u), 1] = [0.998973, 1]; P(B) in [0, u / (m_A + u)] = [0, 0.001027].
    s = parse_option_scores(load("synthetic_B_outside_top"), ["A", "B"])
    assert s.error is None and all(math.isnan(p) for p in s.probs.values())
    m_a, u = e(-0.0222) + e(-6.2), e(-6.9)
    assert s.bounds["A"] == pytest.approx([m_a / (m_a + u), 1.0])
    assert s.bounds["B"] == pytest.approx([0.0, u / (m_a + u)])
    assert s.bounds["A"][0] == pytest.approx(0.998973, abs=1e-6) and s.mass == pytest.approx(m_a)


def test_bounds_use_the_unlisted_mass_when_it_is_smaller():
    from judgebias.backends.openai_parsing import option_bounds

    # Top list covers 0.97 + 0.02 + 0.009 = 0.999: unlisted 0.001 < smallest listed 0.009.
    # A (0.97) and "x" listed, B missing: u = 0.001 -> P(A) in [0.97 / 0.971, 1].
    b = option_bounds({"A": 0.97, "B": 0.0}, smallest_listed=0.009, unlisted=0.001)
    assert b == {"A": pytest.approx([0.97 / 0.971, 1.0]), "B": pytest.approx([0.0, 0.001 / 0.971])}
    # Three options, two missing: together at most the unlisted 0.001, each at most u = 0.001.
    b = option_bounds({"A": 0.97, "B": 0.0, "C": 0.0}, smallest_listed=0.009, unlisted=0.001)
    assert b["A"] == pytest.approx([0.97 / 0.971, 1.0]) and b["C"] == pytest.approx([0.0, 0.001 / 0.971])


def test_real_llamacpp_server_payload_with_b_outside_its_top_20():
    # llama-cpp-python's server, SmolLM2 Q4_1, a real bench prompt: the answer starts "You ..." and
    # its top-20 at that token hold "A" (-2.09563) but no "B". Listed total 0.642098, smallest listed
    # e^-5.06593 = 0.0063085 < unlisted 0.357902, so u = 0.0063085 and m_A = e^-2.09563 = 0.122996:
    # P(A) in [0.122996 / (0.122996 + 0.0063085), 1] = [0.95121, 1], never the point value 1.000.
    s = parse_option_scores(load("llamacpp_server_B_outside_top20"), ["A", "B"])
    tops = load("llamacpp_server_B_outside_top20")["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    assert len(tops) == 20 and s.error is None and math.isnan(s.probs["A"])
    m_a, u = e(-2.095630407333374), e(min(t["logprob"] for t in tops))
    assert s.bounds["A"] == pytest.approx([m_a / (m_a + u), 1.0])
    assert s.bounds["A"][0] == pytest.approx(0.95121, abs=1e-5)
    assert s.mass == pytest.approx(m_a)  # visibly off-format: 12% of the mass on the options
