"""Exact option probabilities through a server that returns the log-probs of named token ids.

Top-k log-probabilities give P(A) only as a bound when "B" falls outside the top k (14-15 of 48
SmolLM2 answers through llama.cpp's servers). vLLM's chat and completions routes take
``logprob_token_ids`` (its extension; it requires ``logprobs``: true on chat, any number on
completions) and list exactly those tokens at each generated position, so P(A) is exact there.
``return_tokens_as_token_ids`` makes it name them as
``token_id:N``: two ids that decode to the same text stay apart, and each id maps to its option
through the tokenizer's variants (``token_batching.option_variants``), as the in-process engine
sums them. A server that ignores both fields answers without those entries: ``parse`` then says so
(None) and the caller asks again the usual way, keeping today's bounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from judgebias.backends.protocol import OptionScores

MAX_TOKEN_IDS = 128  # vLLM 0.32's cap on logprob_token_ids per request
_PREFIX = "token_id:"


def flat_ids(variants: Mapping[str, Sequence[int]]) -> list[int]:
    return [t for ids in variants.values() for t in ids]


def extend_request(kwargs: dict[str, Any], variants: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """A scoring request (chat or completions) that asks for every option's token ids at one
    generated token: the answer position the in-process engine reads (prefill only, ``max_tokens=1``)."""
    out = dict(kwargs)
    for field in ("max_tokens", "max_completion_tokens"):
        if field in out:
            out[field] = 1
    # Completions take a number here (vLLM then lists the named ids instead of a top-k); chat a flag.
    out["logprobs"] = len(flat_ids(variants)) if "prompt" in out else True
    out.pop("top_logprobs", None)
    out["extra_body"] = {**out.get("extra_body", {}), "logprob_token_ids": flat_ids(variants),
                         "return_tokens_as_token_ids": True}
    return out


def parse(response: Mapping[str, Any], variants: Mapping[str, Sequence[int]]) -> OptionScores | None:
    """Normalized option probabilities from the first generated position's listed token ids; None
    when the reply does not list every requested id (the server ignored the extension)."""
    try:
        choice = response["choices"][0]
        listed = choice["logprobs"]
        if "content" in listed:  # chat: [{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}]
            pairs = [(top.get("token", ""), top.get("logprob"))
                     for top in listed["content"][0].get("top_logprobs") or []]
        else:  # completions: "top_logprobs": [{token: logprob}] per generated token
            pairs = list((listed["top_logprobs"][0] or {}).items())
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    by_id: dict[int, float] = {}
    for token, lp in pairs:
        token = str(token)
        if token.startswith(_PREFIX) and lp is not None:
            try:
                by_id[int(token[len(_PREFIX):])] = float(lp)
            except ValueError:
                return None
    if any(t not in by_id for t in flat_ids(variants)):
        return None
    # vLLM floors a log-prob at -9999 in its reply: exp() of it is 0, as it should be.
    per_option = {o: sum(math.exp(by_id[t]) for t in ids) for o, ids in variants.items()}
    mass = sum(per_option.values())
    text = (choice.get("message") or {}).get("content") or choice.get("text") or ""
    if mass <= 0:
        return OptionScores(dict.fromkeys(variants, math.nan), mass=mass, raw=text,
                            error="every option has probability 0 at the answer token")
    return OptionScores({o: p / mass for o, p in per_option.items()}, mass=mass, raw=text)
