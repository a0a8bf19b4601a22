"""Requests for the completions endpoint (``/v1/completions``): raw text in, no chat template.

A base model's few-shot prompt is text for the model to continue, so it goes to this endpoint as it
is. Sent as a chat message it would be wrapped in a chat template the model never learnt, or
refused by a server whose model has none. Log-probabilities on this endpoint are the legacy form:
``logprobs`` is the number of alternatives per generated token and they come back as parallel
lists (``openai_parsing.logprob_entries`` reads both forms).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from judgebias.backends.protocol import Prompt

Route = Literal["chat", "completions"]


def route(prompt: Prompt) -> Route:
    """The endpoint a prompt goes to: raw text to completions, chat messages to chat-completions."""
    return "completions" if prompt.text is not None else "chat"


def context_text(prompt: Prompt) -> str:
    """The raw text a completions-endpoint context stands for (chat needs a template: refused)."""
    if prompt.text is None:
        raise ValueError("the completions endpoint takes raw text; a chat context needs the model's chat "
                         "template (use a local backend for chat-context log-probabilities)")
    return prompt.text + prompt.assistant_prefix


def build_completion_request(model: str, prompt: Prompt, *, max_tokens: int, temperature: float = 0.0,
                             top_p: float = 1.0, seed: int | None = None, stop: Sequence[str] = (),
                             logprobs: int | None = None) -> dict[str, Any]:
    """``client.completions.create`` kwargs; the assistant prefix ends the text the model continues,
    so there is no prefix mode to choose here."""
    kwargs: dict[str, Any] = {"model": model, "prompt": context_text(prompt), "max_tokens": max_tokens,
                              "temperature": temperature, "top_p": top_p}
    if seed is not None:
        kwargs["seed"] = seed
    if stop:
        kwargs["stop"] = list(stop)
    if logprobs is not None:
        kwargs["logprobs"] = logprobs
    return kwargs


def build_echo_request(model: str, context: Prompt, continuation: str) -> dict[str, Any]:
    """``client.completions.create`` kwargs returning the prompt's own token log-probs (echo)."""
    # max_tokens=1, not 0: several servers (vLLM) reject 0; the one generated token is ignored.
    return {"model": model, "prompt": context_text(context) + continuation, "echo": True, "logprobs": 1,
            "max_tokens": 1, "temperature": 0.0}
