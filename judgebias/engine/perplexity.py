"""A judge's perplexity of each response given its prompt (the perplexity-familiarity bias).

The context is what the response was written for: ``"chat"`` puts the prompt in a user turn of
the judge's chat template, ``"plain"`` uses the prompt text followed by a blank line, and
``"template:<name>"`` uses a generation template (e.g. ``template:dbg-generate``) as the generator
saw it. ``"auto"`` is chat for models with a chat template, else plain. Perplexity is
exp(mean negative log-likelihood) over the response's tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd

from judgebias.backends.kinds import uses_chat
from judgebias.backends.protocol import Backend, Prompt, TokenLogprobs


def context_prompt(prompt: str, mode: str, chat: bool) -> Prompt:
    if mode == "auto":
        mode = "chat" if chat else "plain"
    if mode == "chat":
        return Prompt.chat(("user", prompt))
    if mode == "plain":
        return Prompt.raw(prompt + "\n\n")
    if mode.startswith("template:"):
        from judgebias.prompts import generation_template

        return generation_template(mode.split(":", 1)[1]).build(prompt, chat=chat)
    raise ValueError(f"unknown perplexity context {mode!r}; use auto, chat, plain or template:<name>")


def response_logprobs(backend: Backend, prompts: Sequence[str], responses: Sequence[str], *,
                      context: str = "auto", chunk_size: int = 256,
                      progress: Callable[[int], None] | None = None) -> list[TokenLogprobs]:
    chat = uses_chat(backend)
    contexts = [context_prompt(p, context, chat) for p in prompts]
    out: list[TokenLogprobs] = []
    for start in range(0, len(contexts), chunk_size):
        stop = min(len(contexts), start + chunk_size)
        out.extend(backend.continuation_logprobs(contexts[start:stop], list(responses[start:stop])))
        if progress:
            progress(stop - start)
    return out


def fill_perplexity(df: pd.DataFrame, backend: Backend, *, context: str = "auto", chunk_size: int = 256,
                    progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """A copy of ``df`` with ``ppl_a``/``ppl_b`` from ``backend`` (NaN plus ``ppl_error`` on failure).

    Each distinct (prompt, response) is computed once, however many rows share it.
    """
    for column in ("prompt", "response_a", "response_b"):
        if column not in df.columns:
            raise ValueError(f"table has no {column!r} column")
    keys: dict[tuple[str, str], int] = {}
    for prompt, a, b in zip(df["prompt"], df["response_a"], df["response_b"], strict=True):
        keys.setdefault((prompt, a), len(keys))
        keys.setdefault((prompt, b), len(keys))
    items = list(keys)
    lps = response_logprobs(backend, [p for p, _ in items], [r for _, r in items], context=context,
                            chunk_size=chunk_size, progress=progress)
    ppl = {k: (lp.perplexity if not lp.error else math.nan) for k, lp in zip(items, lps, strict=True)}
    err = {k: lp.error for k, lp in zip(items, lps, strict=True)}
    out = df.copy()
    out["ppl_a"] = [ppl[(p, a)] for p, a in zip(df["prompt"], df["response_a"], strict=True)]
    out["ppl_b"] = [ppl[(p, b)] for p, b in zip(df["prompt"], df["response_b"], strict=True)]
    errors = []
    for p, a, b in zip(df["prompt"], df["response_a"], df["response_b"], strict=True):
        msgs = [f"{side}: {err[(p, r)]}" for side, r in (("a", a), ("b", b)) if err[(p, r)]]
        errors.append("; ".join(msgs) or None)
    out["ppl_error"] = errors
    return out


def fill_response_perplexity(df: pd.DataFrame, backend: Backend, *, context: str = "auto",
                             chunk_size: int = 256,
                             progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """A copy of a pointwise table with ``ppl`` (the judge's perplexity of ``response`` given
    ``prompt``; NaN plus ``ppl_error`` on failure), each distinct (prompt, response) computed once."""
    for column in ("prompt", "response"):
        if column not in df.columns:
            raise ValueError(f"table has no {column!r} column")
    items = list(dict.fromkeys(zip(df["prompt"], df["response"], strict=True)))
    lps = response_logprobs(backend, [p for p, _ in items], [r for _, r in items], context=context,
                            chunk_size=chunk_size, progress=progress)
    by = dict(zip(items, lps, strict=True))
    keys = list(zip(df["prompt"], df["response"], strict=True))
    out = df.copy()
    out["ppl"] = [math.nan if by[k].error else by[k].perplexity for k in keys]
    out["ppl_error"] = [by[k].error or None for k in keys]
    return out
