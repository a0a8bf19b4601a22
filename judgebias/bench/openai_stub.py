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

The Batch API as OpenAI documents it: ``POST /v1/files`` (multipart, ``purpose=batch``, a JSONL
file of ``{"custom_id", "method", "url", "body"}`` lines), ``POST /v1/batches`` (``input_file_id``,
``endpoint``, ``completion_window``, ``metadata``), ``GET /v1/batches`` and ``/v1/batches/{id}``
(``validating`` -> ``in_progress`` -> ``completed`` once ``batch_seconds`` have passed, with
``request_counts`` and ``output_file_id``), ``GET /v1/files/{id}/content`` (the output: one line a
request, ``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}``). Files
uploaded, batches created and outputs read are counted.

Run it alone: ``python -m judgebias.bench.openai_stub --port 8011 --latency 0.5 --rpm 1200``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import email.parser
import hashlib
import itertools
import json
import math
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MESSAGE_OVERHEAD = 3  # tokens per chat message in OpenAI's documented count
REPLY_PRIMING = 3


def reply_body(model: str, prompt_tokens: int, fingerprint: str | None = None, answer: str = "A"
               ) -> dict[str, Any]:
    """A chat completion answering ``answer`` ("A" or "B") with the top log-probs a judge reads P(A)
    from; with ``fingerprint``, the ``system_fingerprint`` OpenAI sends with each reply."""
    other = "B" if answer == "A" else "A"
    top = [{"token": t, "logprob": lp, "bytes": list(t.encode())}
           for t, lp in ((answer, -0.105), (other, -2.408), (" " + answer, -4.6), ("The", -6.0))]
    extra = {"system_fingerprint": fingerprint} if fingerprint else {}
    return {"id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()), "model": model,
            **extra, "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": answer},
                         "logprobs": {"content": [{"token": answer, "logprob": -0.105,
                                                   "bytes": list(answer.encode()),
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
        self.batch_seconds = 0.0
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.outputs_read = 0
        # The Authorization header of each chat request, counted: which credentials reached the server.
        self.authorizations: collections.Counter[str] = collections.Counter()
        self._ids = itertools.count(1)
        # What the endpoint says it serves (a test changes them to play a provider's silent update):
        # the reply's "model" (default: the name asked for) and its "system_fingerprint" (default: none).
        self.served_model: str | None = None
        self.fingerprint: str | None = None
        self.answer = "A"  # the letter every chat completion answers

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

    def new_id(self, prefix: str) -> str:
        with self.lock:
            return f"{prefix}-{next(self._ids)}"

    def batch_view(self, batch_id: str) -> dict:
        """The batch as the API shows it now: completed (its output written) once its time is up."""
        with self.lock:
            b = self.batches[batch_id]
            if b["status"] != "completed" and self.clock() - b["_created"] >= self.batch_seconds:
                lines, answered = [], 0
                for line in self.files[b["input_file_id"]].decode().splitlines():
                    req = json.loads(line)
                    messages = req["body"].get("messages") or []
                    tokens = self.count_tokens(messages)
                    self.accepted[message_key(messages)] += 1
                    self.prompt_tokens += tokens
                    answered += 1
                    lines.append(json.dumps({"id": f"batch_req_{answered}", "custom_id": req["custom_id"],
                                             "response": {"status_code": 200, "request_id": f"r{answered}",
                                                          "body": reply_body(req["body"].get("model", "stub"),
                                                                             tokens)},
                                             "error": None}))
                out_id = f"file-out-{batch_id}"
                self.files[out_id] = ("\n".join(lines) + "\n").encode()
                b.update(status="completed", output_file_id=out_id, completed_at=int(time.time()),
                         request_counts={"total": answered, "completed": answered, "failed": 0})
            elif b["status"] == "validating":
                b["status"] = "in_progress"
            return {k: v for k, v in b.items() if not k.startswith("_")}

    def summary(self) -> dict[str, Any]:
        with self.lock:
            return {"files_uploaded": sum(1 for k in self.files if not k.startswith("file-out")),
                    "batches_created": len(self.batches), "outputs_read": self.outputs_read,
                    "accepted": sum(self.accepted.values()), "distinct": len(self.accepted),
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
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/health":
                self._send(200, {"status": "ok"})
            elif path == "/stats":
                self._send(200, state.summary())
            elif path.endswith("/batches"):
                with state.lock:
                    ids = list(state.batches)
                self._send(200, {"object": "list", "data": [state.batch_view(i) for i in reversed(ids)],
                                 "has_more": False})
            elif "/batches/" in path:
                batch_id = path.rsplit("/", 1)[1]
                if batch_id not in state.batches:
                    self._send(404, {"error": {"message": f"no batch {batch_id}"}})
                else:
                    self._send(200, state.batch_view(batch_id))
            elif "/files/" in path and path.endswith("/content"):
                file_id = path.rsplit("/", 2)[1]
                with state.lock:
                    data = state.files.get(file_id)
                    state.outputs_read += data is not None and file_id.startswith("file-out")
                if data is None:
                    self._send(404, {"error": {"message": f"no file {file_id}"}})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.rstrip("/").endswith("/files"):
                self._upload(raw)
                return
            body = json.loads(raw or b"{}")
            if self.path.rstrip("/").endswith("/batches"):
                if body.get("input_file_id") not in state.files or body.get("completion_window") != "24h":
                    self._send(400, {"error": {"message": "needs an uploaded input_file_id and "
                                                          "completion_window 24h"}})
                    return
                batch_id = state.new_id("batch")
                with state.lock:
                    state.batches[batch_id] = {
                        "id": batch_id, "object": "batch", "endpoint": body.get("endpoint"),
                        "input_file_id": body["input_file_id"], "completion_window": "24h",
                        "status": "validating", "output_file_id": None, "error_file_id": None,
                        "created_at": int(time.time()), "metadata": body.get("metadata"),
                        "request_counts": {"total": 0, "completed": 0, "failed": 0},
                        "_created": state.clock()}
                self._send(200, state.batch_view(batch_id))
                return
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
                with state.lock:
                    state.authorizations[self.headers.get("Authorization") or ""] += 1
                model = state.served_model or str(body.get("model", "stub"))
                self._send(200, reply_body(model, tokens, state.fingerprint, state.answer), headers)
            finally:
                with state.lock:
                    state.inflight -= 1

        def _upload(self, raw: bytes) -> None:
            head = f"Content-Type: {self.headers.get('Content-Type')}\r\n\r\n".encode()
            message = email.parser.BytesParser().parsebytes(head + raw)
            parts = {p.get_param("name", header="content-disposition"): p.get_payload(decode=True)
                     for p in message.get_payload()} if message.is_multipart() else {}
            if parts.get("purpose") != b"batch" or not parts.get("file"):
                self._send(400, {"error": {"message": "a batch file needs purpose=batch and a file"}})
                return
            file_id = state.new_id("file")
            with state.lock:
                state.files[file_id] = parts["file"]
            self._send(200, {"id": file_id, "object": "file", "bytes": len(parts["file"]),
                             "created_at": int(time.time()), "filename": "requests.jsonl",
                             "purpose": "batch", "status": "processed"})

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
