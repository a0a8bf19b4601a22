"""Judging through a provider's Batch API (OpenAI's format: a JSONL file of requests uploaded with
``purpose=batch``, one batch over it, its output file read when it completes; about half the price,
answered within a day).

``BatchBackend`` wraps an ``OpenAICompatBackend`` (its request building and parsing, its client)
and sends each call's items as one batch. Resumable: the state of every batch lives in
``state_dir/batch_state.json``, keyed by the digest of its request file, and is written after each
step (file uploaded, batch created, output read); the batch carries the digest in its metadata,
so a run killed between creating the batch and writing its id finds it again among the account's
batches instead of paying for a second one. A rerun after a kill polls the same batch. Answers
reach the call cache through ``CachedBackend`` like any backend's (the identity is the synchronous
route's: the same model gives the same answers), so a rerun after completion sends nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from judgebias.backends import openai_parsing as op
from judgebias.backends.openai_compat import OpenAICompatBackend, ServiceUnavailable
from judgebias.backends.protocol import Generation, GenerationParams, OptionScores, Prompt, TokenLogprobs
from judgebias.runs import interrupts

STATE_FILE = "batch_state.json"
ENDPOINT = "/v1/chat/completions"
METADATA_KEY = "judgebias_input"
FAILED = ("failed", "expired", "cancelled", "cancelling")


class BatchBackend:
    """``Backend`` over the Batch API; ``poll_s``: seconds between two looks at a batch's status,
    ``report(text)``: where the status goes (a log line per change)."""

    kind = "openai-batch"

    def __init__(self, inner: OpenAICompatBackend, state_dir: str | Path, *, poll_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep,
                 report: Callable[[str], None] | None = None) -> None:
        if not poll_s >= 0:
            raise ValueError(f"poll_s must be >= 0, got {poll_s}")
        self.inner, self.name = inner, inner.name
        self.state_dir = Path(state_dir)
        self.poll_s, self.sleep, self.report = poll_s, sleep, report or (lambda text: None)

    def identity(self) -> dict:
        return self.inner.identity()

    def __getattr__(self, attr: str) -> Any:  # usage_summary, prices, model, ...
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    # ------------------------------------------------------------------ state

    @property
    def state_path(self) -> Path:
        return self.state_dir / STATE_FILE

    def _state(self) -> dict[str, dict]:
        if not self.state_path.exists():
            return {}
        try:
            return json.loads(self.state_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{self.state_path}: not a batch state ({exc}); it names the batches this "
                             "run submitted: fix it rather than remove it, or a rerun pays again") from None

    def _save(self, digest: str, entry: dict) -> None:
        state = self._state()
        state[digest] = entry
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_name(STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, self.state_path)

    # ------------------------------------------------------------------ one batch

    def _bodies(self, requests: Sequence[dict]) -> list[dict | str]:
        """Each request's answer body, or the reason it has none, through one batch."""
        lines = []
        for i, kwargs in enumerate(requests):
            body = {k: v for k, v in kwargs.items() if k != "extra_body"}
            body |= dict(kwargs.get("extra_body") or {})  # what the client would have merged in
            lines.append({"custom_id": f"item-{i}", "method": "POST", "url": ENDPOINT, "body": body})
        content = "".join(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in lines)
        digest = hashlib.sha256(content.encode()).hexdigest()
        entry = self._state().get(digest, {})
        client = self.inner.client()
        if "batch_id" not in entry:
            if "file_id" not in entry:
                uploaded = client.files.create(file=("requests.jsonl", content.encode()), purpose="batch")
                entry = {"file_id": uploaded.id, "items": len(lines), "status": "uploaded"}
                self._save(digest, entry)
            found = next((b for b in client.batches.list(limit=100).data
                          if (b.metadata or {}).get(METADATA_KEY) == digest), None)
            if found is None:
                found = client.batches.create(input_file_id=entry["file_id"], endpoint=ENDPOINT,
                                              completion_window="24h", metadata={METADATA_KEY: digest})
            entry = {**entry, "batch_id": found.id, "status": found.status}
            self._save(digest, entry)
            self.report(f"batch {found.id} submitted: {len(lines)} requests")
        else:
            self.report(f"batch {entry['batch_id']} submitted before: polling it again")
        batch = self._wait(entry["batch_id"])
        bodies = self._read(client, batch, len(lines))
        self._save(digest, {**entry, "status": "read", "output_file_id": batch.output_file_id})
        return bodies

    def _wait(self, batch_id: str):
        client = self.inner.client()
        seen = None
        while True:
            batch = client.batches.retrieve(batch_id)
            counts = getattr(batch, "request_counts", None)
            line = f"batch {batch_id}: {batch.status}" + (
                f" ({counts.completed}/{counts.total} done)" if counts and counts.total else "")
            if line != seen:
                self.report(line)
                seen = line
            if batch.status == "completed":
                return batch
            if batch.status in FAILED:
                raise ServiceUnavailable(f"batch {batch_id} on {self.inner.base_url} ended {batch.status!r}; "
                                         f"its state is in {self.state_path} (remove its entry to submit "
                                         "it again)")
            interrupts.check()
            self.sleep(self.poll_s)

    def _read(self, client, batch, n: int) -> list[dict | str]:
        by_id: dict[str, dict] = {}
        for file_id in (batch.output_file_id, getattr(batch, "error_file_id", None)):
            if not file_id:
                continue
            for line in client.files.content(file_id).content.decode("utf-8").splitlines():
                if line.strip():
                    rec = json.loads(line)
                    by_id[rec.get("custom_id")] = rec
        out: list[dict | str] = []
        for i in range(n):
            rec = by_id.get(f"item-{i}")
            response = (rec or {}).get("response") or {}
            if rec is None:
                out.append(f"batch {batch.id} has no answer for item {i}")
            elif rec.get("error") or response.get("status_code") != 200:
                error = rec.get("error") or (response.get("body") or {}).get("error") or {}
                out.append(f"batch {batch.id}, item {i}: HTTP {response.get('status_code')}: "
                           f"{error.get('message', error) if isinstance(error, dict) else error}")
            else:
                out.append(response["body"])
        return out

    # ------------------------------------------------------------------ Backend protocol

    def _chat_only(self, prompts: Sequence[Prompt]) -> None:
        if any(p.text is not None for p in prompts):
            raise ValueError("--batch-api sends chat prompts (the /v1/chat/completions route); a raw-text "
                             "(few-shot) prompt needs the synchronous route")

    def score_options(self, prompts: Sequence[Prompt], options: Sequence[str],
                      on_results: Callable[[dict[int, OptionScores]], None] | None = None
                      ) -> list[OptionScores]:
        options = list(options)
        op.option_normalizer(options)
        self._chat_only(prompts)
        inner = self.inner
        requests = [op.build_score_request(inner.model, p, max_tokens=inner.score_max_tokens,
                                           top_logprobs=inner.top_logprobs, logprobs=inner.use_logprobs,
                                           prefix_mode=inner.prefix_mode,
                                           max_tokens_field=inner.max_tokens_field)
                    for p in prompts]
        out = []
        for body in self._bodies(requests):
            if isinstance(body, str):
                out.append(OptionScores(dict.fromkeys(options, math.nan), error=body))
                continue
            inner._log("score_options", body, 0.0, 1)
            out.append(op.parse_option_scores(body, options, answer_after=inner.answer_after))
        if on_results:
            on_results(dict(enumerate(out)))
        return out

    def generate(self, prompts: Sequence[Prompt], params: GenerationParams,
                 on_results: Callable[[dict[int, Generation]], None] | None = None) -> list[Generation]:
        self._chat_only(prompts)
        inner = self.inner
        requests = [op.build_generate_request(inner.model, p, params, prefix_mode=inner.prefix_mode,
                                              max_tokens_field=inner.max_tokens_field) for p in prompts]
        out = []
        for body in self._bodies(requests):
            if isinstance(body, str):
                out.append(Generation("", error=body))
                continue
            inner._log("generate", body, 0.0, 1)
            out.append(op.parse_generation(body, 0.0))
        if on_results:
            on_results(dict(enumerate(out)))
        return out

    def continuation_logprobs(self, contexts: Sequence[Prompt], continuations: Sequence[str]
                              ) -> list[TokenLogprobs]:
        return [TokenLogprobs((), error="the batch route gives no prompt log-probs (use it without "
                                        "--perplexity)") for _ in contexts]
