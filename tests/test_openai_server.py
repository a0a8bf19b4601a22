"""OpenAICompatBackend against real sockets.

* A scripted HTTP server (``http.server`` in a thread on 127.0.0.1) answers with recorded payloads
  or with 429/5xx/400/401 on cue: retries, give-up errors, per-item errors, bounded concurrency,
  usage and cost, all through the real ``openai`` client and a real socket.
* Nothing listening on a free port: the endpoint-down error names the endpoint, in bounded time.
The real servers (``transformers serve``, llama.cpp's) are in ``test_openai_real_servers``.
"""

from __future__ import annotations

import json
import math
import pickle
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import free_port

from judgebias.backends.call_cache import CachedBackend, ResponseCache
from judgebias.backends.openai_compat import EndpointError, OpenAICompatBackend, ServiceUnavailable
from judgebias.backends.protocol import Backend, GenerationParams, Prompt

PAYLOADS = Path(__file__).parent / "data" / "openai_payloads"


def payload(name: str) -> dict:
    return json.loads((PAYLOADS / f"{name}.json").read_text())


def judge_prompt(question: str, first: str, second: str) -> Prompt:
    return Prompt.chat(
        ("system", "You are a fair judge. Answer with a single letter: A or B."),
        ("user", f"Question: {question}\n\n[Response A]\n{first}\n\n[Response B]\n{second}\n\n"
                 "Which response is better? Answer A or B."))


# ------------------------------------------------------------------ scripted server


class Scripted:
    """What the scripted server answers, in order; then ``default`` forever."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict, dict]] = []
        self.default: tuple[int, dict, dict] = (200, payload("synthetic_A_top"), {})
        self.delay_s = 0.0
        self.requests: list[dict] = []
        self.inflight = self.peak = 0
        self.lock = threading.Lock()

    def then(self, status: int, body: dict | bytes | None = None, headers: dict | None = None) -> Scripted:
        self.script.append((status, body or {"error": {"message": f"scripted {status}"}}, headers or {}))
        return self


@pytest.fixture
def scripted():
    state = Scripted()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.requests.append({"path": self.path, **body})
                state.inflight += 1
                state.peak = max(state.peak, state.inflight)
                status, reply, headers = state.script.pop(0) if state.script else state.default
            time.sleep(state.delay_s)
            data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()  # bytes: sent as is
            self.send_response(status)
            if "Content-Type" not in headers:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            with state.lock:
                state.inflight -= 1

        def log_message(self, *args):  # keep pytest output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield state
    server.shutdown()
    server.server_close()


def backend_for(state: Scripted, **kw) -> OpenAICompatBackend:
    kw = {"max_tries": 4, "backoff_s": 0.01, "max_backoff_s": 0.05, "timeout_s": 10, **kw}
    return OpenAICompatBackend(kw.pop("model", "gpt-test"), state.base_url, **kw)


PROMPT = judge_prompt("What is 2+2?", "4", "5")


def test_is_a_backend(scripted):
    assert isinstance(backend_for(scripted), Backend)


def test_retries_429_twice_then_answers(scripted):
    scripted.then(429).then(429)
    b = backend_for(scripted)
    (scores,) = b.score_options([PROMPT], ["A", "B"])
    expected = (math.exp(-0.105) + math.exp(-4.6)) / (math.exp(-0.105) + math.exp(-4.6) + math.exp(-2.408))
    assert scores.error is None and scores.probs["A"] == pytest.approx(expected)
    assert len(scripted.requests) == 3 and scripted.requests[0] == scripted.requests[2]
    sent = scripted.requests[0]
    assert sent["path"] == "/v1/chat/completions" and sent["logprobs"] is True and sent["top_logprobs"] == 20
    assert sent["temperature"] == 0.0 and sent["max_tokens"] == 8
    assert [u.tries for u in b.usage_log] == [3]


def test_5xx_then_answers_and_retry_after_is_read(scripted):
    scripted.then(503, headers={"Retry-After": "0"}).then(500)
    (scores,) = backend_for(scripted).score_options([PROMPT], ["A", "B"])
    assert scores.error is None and len(scripted.requests) == 3


def test_malformed_json_is_retried_then_answers(scripted):
    # A proxy cut short or a server bug: HTTP 200 with a body that is not the JSON it claims.
    scripted.then(200, b'{"id": "chatcmpl-1", "choices": [{"mess').then(200, b"<html>Bad Gateway</html>")
    b = backend_for(scripted)
    (scores,) = b.score_options([PROMPT], ["A", "B"])
    assert scores.error is None and len(scripted.requests) == 3
    assert [u.tries for u in b.usage_log] == [3]


def test_an_html_page_with_http_200_is_retried_then_answers(scripted):
    # A proxy's error page served as 200 text/html: the client hands back a str, not a completion.
    scripted.then(200, b"<html><body>upstream error</body></html>", {"Content-Type": "text/html"})
    b = backend_for(scripted)
    (scores,) = b.score_options([PROMPT], ["A", "B"])
    assert scores.error is None and len(scripted.requests) == 2


def test_a_deeply_nested_reply_is_retried_then_answers(scripted):
    # A hostile or broken server: JSON nested past Python's recursion limit.
    scripted.then(200, b"[" * 200_000 + b"]" * 200_000)
    b = backend_for(scripted)
    (scores,) = b.score_options([PROMPT], ["A", "B"])
    assert scores.error is None and len(scripted.requests) == 2


def test_an_html_page_every_time_gives_up_naming_the_endpoint(scripted):
    scripted.default = (200, b"<html>maintenance</html>", {"Content-Type": "text/html"})
    with pytest.raises(ServiceUnavailable, match=rf"{scripted.base_url} did not answer after 2 tries.*"
                                                 r"not a completion"):
        backend_for(scripted, max_tries=2).score_options([PROMPT], ["A", "B"])


def test_malformed_json_every_time_gives_up_naming_the_endpoint(scripted):
    scripted.default = (200, b"not json", {})
    with pytest.raises(ServiceUnavailable, match=rf"{scripted.base_url} did not answer after 2 tries.*JSON"):
        backend_for(scripted, max_tries=2).score_options([PROMPT], ["A", "B"])


def test_retry_after_is_waited_in_full(scripted):
    # Jitter may lengthen the server's Retry-After, never shorten it.
    scripted.then(429, headers={"Retry-After": "2"}).then(503, headers={"Retry-After": "0.5"})
    b = backend_for(scripted, max_backoff_s=30)
    waits: list[float] = []
    delay = b._delay
    b._delay = lambda attempt, retry_after: waits.append(delay(attempt, retry_after)) or waits[-1]
    b.score_options([PROMPT], ["A", "B"])
    assert len(waits) == 2 and 2.0 <= waits[0] <= 2.5 and 0.5 <= waits[1] <= 0.75, waits


def test_gives_up_naming_the_endpoint(scripted):
    scripted.default = (429, {"error": {"message": "rate limited"}}, {})
    b = backend_for(scripted, max_tries=3)
    expected = rf"endpoint {scripted.base_url} did not answer after 3 tries"
    with pytest.raises(ServiceUnavailable, match=expected):
        b.score_options([PROMPT], ["A", "B"])
    assert len(scripted.requests) == 3


def test_endpoint_down_fails_fast_with_its_address():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    b = OpenAICompatBackend("gpt-test", url, max_tries=3, backoff_s=0.05, timeout_s=5)
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable, match=rf"{url} did not answer after 3 tries.*APIConnectionError"):
        b.generate([PROMPT], GenerationParams(max_new_tokens=4))
    assert time.monotonic() - started < 20  # a bound on the failure path, not a benchmark


def test_bad_request_is_a_per_item_error_without_retry(scripted):
    scripted.then(400, {"error": {"message": "context length exceeded"}})
    b = backend_for(scripted, concurrency=1)
    first, second = b.score_options([PROMPT, PROMPT], ["A", "B"])
    assert "HTTP 400" in first.error and "context length" in first.error and math.isnan(first.probs["A"])
    assert second.error is None and len(scripted.requests) == 2


def test_rejected_key_is_a_clear_config_error(scripted, monkeypatch):
    monkeypatch.setenv("JB_TEST_KEY", "sk-wrong-123")
    scripted.default = (401, {"error": {"message": "Incorrect API key"}}, {})
    b = backend_for(scripted, api_key_env="JB_TEST_KEY")
    expected = r"refused the API key \(HTTP 401; key from \$JB_TEST_KEY\)"
    with pytest.raises(EndpointError, match=expected) as err:
        b.score_options([PROMPT], ["A", "B"])
    assert "sk-wrong-123" not in str(err.value) and len(scripted.requests) == 1


def test_concurrency_is_bounded(scripted):
    scripted.delay_s = 0.15
    b = backend_for(scripted, concurrency=2)
    out = b.score_options([PROMPT] * 6, ["A", "B"])
    assert all(s.error is None for s in out) and len(scripted.requests) == 6
    assert scripted.peak == 2


def test_server_rejecting_logprobs_falls_back_to_verdicts(scripted):
    scripted.then(400, {"error": {"message": "logprobs is not supported with this model"}})
    scripted.default = (200, payload("synthetic_explain_first_verdict_only"), {})
    b = backend_for(scripted, concurrency=1)
    out = b.score_options([PROMPT, PROMPT], ["A", "B"])
    assert all(s.verdict_only and s.probs == {"A": 0.0, "B": 1.0} for s in out)
    assert [("logprobs" in r) for r in scripted.requests] == [True, False, False]


def test_usage_log_and_cost(scripted):
    b = backend_for(scripted, prices={"gpt-test": (2.5, 10.0)})
    b.score_options([PROMPT, PROMPT], ["A", "B"])
    # synthetic_A_top reports 412 prompt + 1 completion tokens: (412 * 2.5 + 1 * 10) / 1e6 = 0.00104 USD
    summary = b.usage_summary()
    assert (summary["calls"], summary["prompt_tokens"], summary["completion_tokens"]) == (2, 824, 2)
    assert summary["cost_usd"] == pytest.approx(2 * 0.00104)
    assert backend_for(scripted).usage_summary()["cost_usd"] == 0.0  # no calls yet
    unpriced = backend_for(scripted)
    unpriced.score_options([PROMPT], ["A", "B"])
    assert math.isnan(unpriced.usage_summary()["cost_usd"])


def test_generate_and_echo_logprobs(scripted):
    scripted.then(200, payload("transformers_serve_chat_verdict_only"))
    scripted.then(200, payload("synthetic_completions_echo"))
    b = backend_for(scripted)
    params = GenerationParams(max_new_tokens=8, seed=3, stop=("\n",))
    (gen,) = b.generate([Prompt.chat(("user", "Say A."))], params)
    assert gen.text.startswith("A") and gen.seconds > 0
    assert (gen.prompt_tokens, gen.completion_tokens) == (67, 8)
    assert scripted.requests[0]["messages"] == [{"role": "user", "content": "Say A."}]
    assert (scripted.requests[0]["seed"], scripted.requests[0]["stop"]) == (3, ["\n"])
    ctx, chat_ctx = Prompt.raw("The capital of France is"), Prompt.chat(("user", "x"))
    good, refused = b.continuation_logprobs([ctx, chat_ctx], [" Paris", "y"])
    assert good.logprobs == (-0.4,) and "raw text" in refused.error
    assert scripted.requests[1]["path"] == "/v1/completions" and scripted.requests[1]["echo"] is True
    assert len(scripted.requests) == 2  # the chat context never reached the server


def test_fewshot_prompts_go_to_the_completions_endpoint(scripted):
    # A base model's raw-text prompt: /v1/completions, no chat messages; the legacy log-probs parse.
    scripted.then(200, payload("llamacpp_server_completions_fewshot"))
    scripted.then(200, payload("transformers_serve_completions_echo_ignored"))
    b = backend_for(scripted, model="gemma")
    (s,) = b.score_options([Prompt.raw("# Query\n2+2?\n\n# Better response: ")], ["A", "B"])
    assert s.error is None and s.probs["A"] == pytest.approx(0.730, abs=5e-4)
    (gen,) = b.generate([Prompt.raw("The capital of France is")], GenerationParams(max_new_tokens=1))
    assert gen.text == "." and gen.prompt_tokens == 6
    score_req, gen_req = scripted.requests
    assert score_req["path"] == gen_req["path"] == "/v1/completions" and "messages" not in score_req
    assert score_req["logprobs"] == 20 and gen_req["prompt"] == "The capital of France is"
    assert b.identity()["raw_text"] == "completions"  # cached chat-route answers are not reused


def test_server_without_a_completions_route_says_what_fewshot_prompts_need(scripted):
    scripted.default = (404, {"error": {"message": "Not Found"}}, {})
    with pytest.raises(EndpointError, match=r"no completions route.*few-shot prompts need /completions"):
        backend_for(scripted).score_options([Prompt.raw("# Query\n")], ["A", "B"])


def test_endpoint_without_prompt_logprobs_says_so_once(scripted):
    scripted.default = (200, payload("transformers_serve_completions_echo_ignored"), {})
    b = backend_for(scripted, concurrency=1)
    ctx = Prompt.raw("The capital of France is")
    out = b.continuation_logprobs([ctx, ctx, ctx], [" Paris", " Rome", " Lyon"])
    assert all("endpoint does not return prompt logprobs" in t.error and t.logprobs == () for t in out)
    assert len(scripted.requests) == 1  # the other items were not paid for


def test_cache_over_a_real_socket(scripted, tmp_path):
    cached = CachedBackend(backend_for(scripted), ResponseCache(tmp_path))
    prompts = [judge_prompt(f"q{i}", "x", "y") for i in range(3)]
    first = cached.score_options(prompts, ["A", "B"])
    again = CachedBackend(backend_for(scripted, max_tries=1, timeout_s=1), ResponseCache(tmp_path))
    assert again.score_options(prompts, ["A", "B"]) == first  # retries/timeouts are not in the key
    assert len(scripted.requests) == 3 and again.hits == 3


def test_secrets_stay_out_of_identity_repr_and_pickles(monkeypatch):
    monkeypatch.setenv("JB_TEST_KEY", "sk-secret-abc123")
    b = OpenAICompatBackend("gpt-4o-mini", "https://api.example.com/v1/", api_key_env="JB_TEST_KEY",
                            concurrency=8, max_tries=9, timeout_s=3)
    b.client()
    assert b.identity()["base_url"] == "https://api.example.com/v1"
    for text in (json.dumps(b.identity()), repr(b), pickle.dumps(b).decode("latin-1")):
        assert "sk-secret-abc123" not in text
    ident = OpenAICompatBackend("gpt-4o-mini", "https://api.example.com/v1",
                                api_key_env="JB_TEST_KEY").identity()
    assert ident == b.identity()  # concurrency, retries and timeouts change nothing the model says
    clone = pickle.loads(pickle.dumps(b))
    assert clone.identity() == b.identity() and clone.usage_log == []
    given = OpenAICompatBackend("gpt-4o-mini", "https://api.example.com/v1", api_key="sk-given-456")
    assert "sk-given-456" not in pickle.dumps(given).decode("latin-1") + repr(given)
    assert given.client().api_key == "sk-given-456"
    monkeypatch.delenv("JB_TEST_KEY")
    with pytest.raises(ValueError, match=r"set the environment variable JB_TEST_KEY"):
        OpenAICompatBackend("gpt-4o-mini", "https://api.example.com/v1", api_key_env="JB_TEST_KEY")
    OpenAICompatBackend("local", "http://127.0.0.1:9/v1", api_key_env="JB_TEST_KEY")  # dummy key is fine
    with pytest.raises(ValueError, match="unknown openai-compat backend settings"):
        OpenAICompatBackend.from_config({"model": "m", "base_url": "http://127.0.0.1:9/v1", "retries": 3})
    assert OpenAICompatBackend.from_config({"model": "m", "base_url": "http://127.0.0.1:9/v1"}).model == "m"
