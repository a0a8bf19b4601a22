"""A local OpenAI-compatible judge endpoint with a set latency and a rate limit, for the API benchmark
(``benchmarks/bench_api.py``) and the tests of the client's concurrency and cost accounting.

``POST /v1/chat/completions`` answers "A" with top log-probs after ``latency_s``; past ``rpm``
requests a minute (a token bucket refilled continuously, one second of it as burst, as providers
meter) it answers 429 with a Retry-After in seconds, and with ``rate_headers`` every answer carries
``x-ratelimit-limit/remaining/reset-requests`` as OpenAI's API sends them. Refused requests do not
count against the limit. ``usage.prompt_tokens``: with ``tokenizer`` (a model spec the package can
load) the tokens of its chat template's rendering, as vLLM bills the model it serves (a tokenizer
without a template: each message's tokens plus 3, plus 3 for the reply, OpenAI's documented
count); without one, 4 characters a token. ``GET /health`` answers 200,
``GET /stats`` what it saw.

Every accepted request is recorded by the digest of its messages, so a caller can check that no
item was lost or answered twice.

Run it alone: ``python -m judgebias.bench.openai_stub --port 8011 --latency 0.5 --rpm 1200``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MESSAGE_OVERHEAD = 3  # tokens per chat message in OpenAI's documented count
REPLY_PRIMING = 3


def reply_body(model: str, prompt_tokens: int) -> dict[str, Any]:
    """A chat completion answering "A" with the top log-probs a judge reads P(A) from."""
    top = [{"token": t, "logprob": lp, "bytes": list(t.encode())}
           for t, lp in (("A", -0.105), ("B", -2.408), (" A", -4.6), ("The", -6.0))]
    return {"id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "A"},
                         "logprobs": {"content": [{"token": "A", "logprob": -0.105, "bytes": [65],
                                                   "top_logprobs": top}]}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1,
                      "total_tokens": prompt_tokens + 1}}


def token_counter(tokenizer: str | None) -> Callable[[list[dict]], int]:
    """Prompt tokens of a chat request as the stub bills them."""
    if tokenizer is None:
        return lambda messages: sum(math.ceil(len(str(m.get("content", ""))) / 4) + MESSAGE_OVERHEAD
                                    for m in messages) + REPLY_PRIMING
    from judgebias.backends.loading import load_tokenizer

    tok = load_tokenizer(tokenizer)
    if getattr(tok, "chat_template", None):  # as vLLM bills a model it serves: the rendered template
        def rendered(messages: list[dict]) -> int:
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return len(tok(text, add_special_tokens=False).input_ids)
        return rendered
    return lambda messages: sum(len(tok(str(m.get("content", "")), add_special_tokens=False).input_ids)
                                + MESSAGE_OVERHEAD for m in messages) + REPLY_PRIMING


class StubState:
    """The stub's settings and what it saw (thread-safe)."""

    def __init__(self, *, latency_s: float = 0.0, rpm: float | None = None, rate_headers: bool = False,
                 tokenizer: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.latency_s, self.rpm, self.rate_headers = latency_s, rpm, rate_headers
        self.count_tokens = token_counter(tokenizer)
        self.clock = clock
        self.lock = threading.Lock()
        self.rate = (rpm / 60.0) if rpm else math.inf
        self.capacity = max(1.0, self.rate) if rpm else math.inf
        self.level, self.at = self.capacity, clock()
        self.accepted: collections.Counter[str] = collections.Counter()
        self.accepted_times: list[float] = []
        self.refused = 0
        self.inflight = self.peak = 0
        self.prompt_tokens = 0

    def admit(self) -> tuple[bool, dict[str, str]]:
        """Whether the rate limit lets one more request through now, and the headers to send."""
        with self.lock:
            now = self.clock()
            if self.rpm:
                self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
                self.at = now
            ok = self.level >= 1.0
            if ok:
                self.level -= 1.0
            headers: dict[str, str] = {}
            if self.rpm and not ok:
                headers["retry-after"] = f"{(1.0 - self.level) / self.rate:.3f}"
            if self.rpm and self.rate_headers:
                headers |= {"x-ratelimit-limit-requests": str(int(self.rpm)),
                            "x-ratelimit-remaining-requests": str(int(self.level)),
                            "x-ratelimit-reset-requests": f"{(self.capacity - self.level) / self.rate:.3f}s"}
            if not ok:
                self.refused += 1
            return ok, headers

    def record(self, key: str, tokens: int) -> None:
        with self.lock:
            self.accepted[key] += 1
            self.accepted_times.append(self.clock())
            self.prompt_tokens += tokens

    def summary(self) -> dict[str, Any]:
        with self.lock:
            return {"accepted": sum(self.accepted.values()), "distinct": len(self.accepted),
                    "answered_twice": sum(1 for c in self.accepted.values() if c > 1),
                    "refused_429": self.refused, "peak_in_flight": self.peak,
                    "prompt_tokens": self.prompt_tokens}


def message_key(messages: Any) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def make_handler(state: StubState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connections

        def _send(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/") == "/health":
                self._send(200, {"status": "ok"})
            elif self.path.rstrip("/") == "/stats":
                self._send(200, state.summary())
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if not self.path.endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            ok, headers = state.admit()
            if not ok:
                self._send(429, {"error": {"message": "rate limit reached", "type": "requests"}}, headers)
                return
            with state.lock:
                state.inflight += 1
                state.peak = max(state.peak, state.inflight)
            try:
                time.sleep(state.latency_s)
                messages = body.get("messages") or []
                tokens = state.count_tokens(messages)
                state.record(message_key(messages), tokens)
                self._send(200, reply_body(str(body.get("model", "stub")), tokens), headers)
            finally:
                with state.lock:
                    state.inflight -= 1

        def log_message(self, *args):
            pass

    return Handler


class StubServer:
    """The stub on 127.0.0.1 in a thread of this process (``with StubServer(...) as s: s.base_url``)."""

    def __init__(self, state: StubState, port: int = 0) -> None:
        self.state = state
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), make_handler(state))
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def __enter__(self) -> StubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--rpm", type=float, default=None, help="requests a minute before 429s")
    parser.add_argument("--rate-headers", action="store_true", help="send x-ratelimit-* headers")
    parser.add_argument("--tokenizer", default=None, help="count prompt tokens with this model's tokenizer")
    args = parser.parse_args(argv)
    state = StubState(latency_s=args.latency, rpm=args.rpm, rate_headers=args.rate_headers,
                      tokenizer=args.tokenizer)
    server = StubServer(state, args.port)
    with contextlib.suppress(KeyboardInterrupt):
        server.httpd.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
