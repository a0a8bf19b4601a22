"""Pure request building and response parsing for OpenAI-compatible endpoints.

Everything here works on plain dicts (the JSON of the chat-completions / completions format), so it
is tested on recorded payloads without a network. Chat messages go to chat-completions; raw text (a
base model's few-shot prompt) goes to the completions endpoint (``completions_requests``), and both
forms of log-probabilities are read alike. The backend (``openai_compat``) only sends what
these functions build and hands the response's ``model_dump()`` back to them.

Scoring a fixed set of options (e.g. "A"/"B") has two paths:

* **log-probabilities** (the server honours ``logprobs``/``top_logprobs``): at the answer position
  (after any ``<think>`` block and an optional marker such as "[[", the first generated position
  listing the options, up to the first token that is not pure formatting: a base model that starts
  "<Response A>" listed A and B at "<", where a local judge reads them), each option's
  probability is the sum over the top log-probs whose token normalizes to that option (" A", "A",
  "(A", '"A' all count for "A"), as alpaca_eval's ``logprob_parser`` does with exact tokens.
  Probabilities are renormalized over the options; ``mass`` keeps the unnormalized total. Neither
  option among the top log-probs -> NaN and an error.
  Only some of them listed -> ``bounds``, not ``probs``: a missing option's probability lies between
  0 and the smallest listed log-prob's (and the mass the list leaves), so the result is an interval
  per option (a server returning 5 top log-probs would otherwise make P(A) = 1.000 of 0.978).
* **verdict only** (``logprobs`` is null, as ``transformers serve`` returns): the answer text is
  parsed ("A", "(B)", "[[A]]" / "[[B]]" / "[[C]]" = tie after an explanation) into 1/0 (or 0.5/0.5
  for a tie) with ``verdict_only=True``. Off-format text -> NaN and an error, never a guess.

``assistant_prefix`` (text the answer must start with) has no portable chat-completions form:

* ``prefix_mode="none"`` (default): the prefix is not sent; the parsers accept the answer with or
  without it (formatting tokens such as "[[" are skipped). Works with every server.
* ``"continue"``: a trailing assistant message holding the prefix plus vLLM/SGLang's
  ``continue_final_message=True, add_generation_prompt=False``, so the model continues it. Servers
  that validate fields strictly (``transformers serve``: 422) or OpenAI itself reject these fields.
* ``"message"``: only the trailing assistant message (servers that continue a final assistant
  message on their own). OpenAI accepts it but answers a new turn after it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from judgebias.backends.completions_requests import build_completion_request, route
from judgebias.backends.protocol import Generation, GenerationParams, OptionScores, Prompt, TokenLogprobs

PrefixMode = Literal["none", "continue", "message"]
PREFIX_MODES: tuple[str, ...] = ("none", "continue", "message")

# Characters that dress an answer token without changing it: whitespace, quotes, brackets,
# emphasis and trailing punctuation; plus the word-start markers of GPT-2 BPE (Ġ) and
# SentencePiece (▁) that some servers leave in raw token strings.
_DRESSING = " \t\r\n\"'`*_[](){}<>.,:;!?Ġ▁"
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_BRACKET_VERDICT = re.compile(r"\[\[\s*([A-Za-z0-9]+)\s*\]\]")
TIE_LABEL = "C"  # MT-Bench / self-preference prompts: "[[C]]" for a tie


def chat_messages(prompt: Prompt) -> list[dict[str, str]]:
    """The prompt as chat messages; a raw-text prompt becomes one user message."""
    if prompt.text is not None:
        return [{"role": "user", "content": prompt.text}]
    return [{"role": m.role, "content": m.content} for m in prompt.messages]


def build_chat_request(model: str, prompt: Prompt, *, max_tokens: int, temperature: float = 0.0,
                       top_p: float = 1.0, seed: int | None = None, stop: Sequence[str] = (),
                       logprobs: bool = False, top_logprobs: int = 20, prefix_mode: PrefixMode = "none",
                       max_tokens_field: str = "max_tokens") -> dict[str, Any]:
    """Keyword arguments for ``client.chat.completions.create``.

    ``max_tokens_field`` is "max_completion_tokens" for OpenAI's reasoning models, which reject
    "max_tokens". Fields a server may not know go into ``extra_body`` so the client passes them.
    """
    if prefix_mode not in PREFIX_MODES:
        raise ValueError(f"prefix_mode={prefix_mode!r}; expected one of {PREFIX_MODES}")
    if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
        raise ValueError(f"max_tokens_field={max_tokens_field!r}; "
                         "expected max_tokens or max_completion_tokens")
    messages = chat_messages(prompt)
    kwargs: dict[str, Any] = {"model": model, "messages": messages, max_tokens_field: max_tokens,
                              "temperature": temperature, "top_p": top_p}
    if seed is not None:
        kwargs["seed"] = seed
    if stop:
        kwargs["stop"] = list(stop)
    if logprobs:
        kwargs["logprobs"] = True
        kwargs["top_logprobs"] = top_logprobs
    if prompt.assistant_prefix and prefix_mode != "none":
        messages.append({"role": "assistant", "content": prompt.assistant_prefix})
        if prefix_mode == "continue":
            kwargs["extra_body"] = {"continue_final_message": True, "add_generation_prompt": False}
    return kwargs


def build_score_request(model: str, prompt: Prompt, *, max_tokens: int = 8, top_logprobs: int = 20,
                        logprobs: bool = True, prefix_mode: PrefixMode = "none",
                        max_tokens_field: str = "max_tokens") -> dict[str, Any]:
    """A greedy, short request for choosing between options (a few tokens: room for "[[A]]"); a
    raw-text prompt goes to the completions endpoint (see ``route``)."""
    if route(prompt) == "completions":
        return build_completion_request(model, prompt, max_tokens=max_tokens,
                                        logprobs=top_logprobs if logprobs else None)
    return build_chat_request(model, prompt, max_tokens=max_tokens, temperature=0.0, logprobs=logprobs,
                              top_logprobs=top_logprobs, prefix_mode=prefix_mode,
                              max_tokens_field=max_tokens_field)


def build_generate_request(model: str, prompt: Prompt, params: GenerationParams, *,
                           prefix_mode: PrefixMode = "none", max_tokens_field: str = "max_tokens"
                           ) -> dict[str, Any]:
    if route(prompt) == "completions":
        return build_completion_request(model, prompt, max_tokens=params.max_new_tokens,
                                        temperature=params.temperature, top_p=params.top_p,
                                        seed=params.seed, stop=params.stop)
    return build_chat_request(model, prompt, max_tokens=params.max_new_tokens, temperature=params.temperature,
                              top_p=params.top_p, seed=params.seed, stop=params.stop,
                              prefix_mode=prefix_mode, max_tokens_field=max_tokens_field)


# ---------------------------------------------------------------------------------------------
# Parsing


def normalize_token(token: str, casefold: bool = True) -> str:
    s = token.strip(_DRESSING)
    return s.casefold() if casefold else s


def option_normalizer(options: Sequence[str]) -> tuple[bool, dict[str, str]]:
    """Whether case may be folded, and the normalized form of each option.

    Case is folded unless it is what tells the options apart (alpaca_eval's "m" vs "M").
    """
    if len(options) < 2:
        raise ValueError(f"need at least two options, got {list(options)}")
    for casefold in (True, False):
        norm = {o: normalize_token(o, casefold) for o in options}
        if all(norm.values()) and len(set(norm.values())) == len(options):
            return casefold, norm
    raise ValueError(f"options {list(options)} are not distinct after stripping spaces, quotes and brackets")


def _choice(response: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = response.get("choices") or []
    if not choices:
        raise ValueError(f"response has no choices: {str(response)[:200]}")
    return choices[0]


def response_text(response: Mapping[str, Any]) -> str:
    """The generated text of the first choice (chat ``message.content`` or completions ``text``)."""
    choice = _choice(response)
    message = choice.get("message")
    if message is not None:
        return message.get("content") or ""
    return choice.get("text") or ""


def response_usage(response: Mapping[str, Any]) -> tuple[int, int]:
    """(prompt_tokens, completion_tokens); zeros when the server reports no usage."""
    usage = response.get("usage") or {}
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def strip_think(text: str) -> tuple[str, str | None]:
    """Text without ``<think>...</think>`` blocks, and an error if a block never closes."""
    out, rest = [], text
    while True:
        start = rest.find(_THINK_OPEN)
        if start < 0:
            out.append(rest)
            return "".join(out), None
        end = rest.find(_THINK_CLOSE, start)
        if end < 0:
            out.append(rest[:start])
            return "".join(out), "unterminated <think> block (answer cut off by max_tokens?)"
        out.append(rest[:start])
        rest = rest[end + len(_THINK_CLOSE):]


def _nan_scores(options: Sequence[str], raw: str, error: str, **kw: Any) -> OptionScores:
    return OptionScores(dict.fromkeys(options, math.nan), raw=raw, error=error, **kw)


def parse_verdict_text(text: str, options: Sequence[str], *, tie_label: str | None = TIE_LABEL
                       ) -> OptionScores:
    """A verdict read from answer text: 1/0 for the chosen option, 0.5 each for a tie verdict.

    Accepted: a bracketed verdict "[[A]]" anywhere (exactly one distinct one; "[[C]]" = tie when
    ``tie_label`` is not an option), or a first line that is just the option ("A", "(A)", "**A**",
    "A."). Anything else is off-format.
    """
    casefold, norm = option_normalizer(options)
    body, think_error = strip_think(text)
    if think_error:
        return _nan_scores(options, text, f"off-format: {think_error}", verdict_only=True)
    by_norm = {v: o for o, v in norm.items()}
    tie_norm = normalize_token(tie_label, casefold) if tie_label else None
    if tie_norm in by_norm:  # "C" is a real option here, not a tie
        tie_norm = None

    def label_of(s: str) -> str | None:
        n = normalize_token(s, casefold)
        if n in by_norm:
            return by_norm[n]
        return "tie" if tie_norm is not None and n == tie_norm else None

    found = {label_of(m) for m in _BRACKET_VERDICT.findall(body)} - {None}
    if len(found) > 1:
        return _nan_scores(options, text, f"off-format: conflicting verdicts {sorted(found)}",
                           verdict_only=True)
    if not found:
        first_line = next((ln for ln in body.splitlines() if ln.strip()), "")
        label = label_of(first_line)
        # "[[A" / "A]]" when the model continued or repeated an assistant prefix
        found = {label} if label else set()
    if not found:
        shown = body.strip()[:80]
        return _nan_scores(options, text, f"off-format: no verdict among {list(options)} in {shown!r}",
                           verdict_only=True)
    (label,) = found
    if label == "tie":
        probs = {o: 1.0 / len(options) for o in options}
    else:
        probs = {o: 1.0 if o == label else 0.0 for o in options}
    return OptionScores(probs, raw=text, verdict_only=True)


def logprob_entries(logprobs: Any) -> list[Mapping[str, Any]]:
    """Per generated token ``{token, logprob, top_logprobs: [{token, logprob}]}`` from either form:
    chat's ``content`` list, or the completions endpoint's parallel ``tokens`` / ``token_logprobs``
    / ``top_logprobs`` (one ``{token: logprob}`` dict per token). Empty when there are none."""
    if not isinstance(logprobs, Mapping):
        return []
    if logprobs.get("content"):
        return list(logprobs["content"])
    tokens = logprobs.get("tokens") or []
    values = logprobs.get("token_logprobs") or [None] * len(tokens)
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    return [{"token": t, "logprob": lp,
             "top_logprobs": [{"token": k, "logprob": v} for k, v in (top or {}).items()]}
            for t, lp, top in zip(tokens, values, tops, strict=False)]


def _answer_positions(content: Sequence[Mapping[str, Any]], after: str | None) -> tuple[list[int], str]:
    """Where the answer may be read: the generated positions from the first after any ``<think>``
    block and ``after`` marker up to the first non-formatting token, leaving out positions where
    the model wrote only whitespace. Empty, with the reason, when there is no answer token."""
    texts = [t.get("token", "") for t in content]
    full = "".join(texts)
    start = 0
    if full.lstrip().startswith(_THINK_OPEN):
        close = full.find(_THINK_CLOSE)
        if close < 0:
            return [], "unterminated <think> block (answer cut off by max_tokens?)"
        start = close + len(_THINK_CLOSE)
    if after:
        at = full.rfind(after, start)
        if at >= 0:
            start = at + len(after)
    pos, candidates = 0, []
    for i, tok in enumerate(texts):
        end = pos + len(tok)
        if end > start and tok.strip():
            candidates.append(i)
            if normalize_token(tok):
                return candidates, ""
        pos = end
    return [], f"no answer token among the {len(texts)} generated tokens"


def _option_mass(entry: Mapping[str, Any], by_norm: Mapping[str, str], casefold: bool,
                 options: Sequence[str]) -> tuple[dict[str, float], list[Mapping[str, Any]]]:
    """Each option's summed probability among one position's top log-probs, and those tops."""
    tops = entry.get("top_logprobs") or [{"token": entry.get("token", ""), "logprob": entry.get("logprob")}]
    seen: set[str] = set()
    mass_by_option = dict.fromkeys(options, 0.0)
    for top in tops:
        token, lp = top.get("token", ""), top.get("logprob")
        if token in seen or lp is None:
            continue
        seen.add(token)
        option = by_norm.get(normalize_token(token, casefold))
        if option is not None:
            mass_by_option[option] += math.exp(lp)
    return mass_by_option, tops


def parse_option_scores(response: Mapping[str, Any], options: Sequence[str], *,
                        answer_after: str | None = None, tie_label: str | None = TIE_LABEL) -> OptionScores:
    """Option probabilities from a chat-completions or completions response (logprobs path or
    verdict-only path).

    The answer is read at the first candidate position (see ``_answer_positions``) whose top
    log-probs list every option, else at the first listing some (a bound). A formatting token the
    model chose first ("<", "**", "[[") does not hide a first position where the options were
    listed: that is the distribution a local judge reads. ``answer_after``: candidates start after
    the last occurrence of this marker (e.g. "[[" for explain-then-verdict prompts).
    """
    casefold, norm = option_normalizer(options)
    text = response_text(response)
    content = logprob_entries(_choice(response).get("logprobs"))
    if not content:
        return parse_verdict_text(text, options, tie_label=tie_label)
    candidates, why = _answer_positions(content, answer_after)
    if not candidates:
        return _nan_scores(options, text, f"off-format: {why}")
    by_norm = {v: o for o, v in norm.items()}
    read = [(i, *_option_mass(content[i], by_norm, casefold, options)) for i in candidates]
    full = [r for r in read if all(m > 0.0 for m in r[1].values())]
    some = [r for r in read if any(m > 0.0 for m in r[1].values())]
    if not some:
        entry, tops = content[candidates[-1]], read[-1][2]
        shown = [t.get("token") for t in tops[:5]]
        return _nan_scores(options, text, f"off-format: neither of {list(options)} among the top "
                           f"{len(tops)} log-probs at the answer token {entry.get('token')!r} (top: {shown})")
    _, mass_by_option, tops = (full or some)[0]
    mass = sum(mass_by_option.values())
    if not full:
        listed = [math.exp(t["logprob"]) for t in tops if t.get("logprob") is not None]
        return OptionScores(dict.fromkeys(options, math.nan), mass=mass, raw=text,
                            bounds=option_bounds(mass_by_option, min(listed), 1.0 - sum(listed)))
    return OptionScores({o: m / mass for o, m in mass_by_option.items()}, mass=mass, raw=text)


def option_bounds(mass_by_option: Mapping[str, float], smallest_listed: float,
                  unlisted: float) -> dict[str, list[float]]:
    """[low, high] of each option's normalized probability when the options with mass 0 were not
    among the top log-probs: each such option has at most ``u = min(smallest_listed, unlisted)``
    (a token outside the list is below every listed one, and all of them share what the list
    leaves), all of them together at most ``unlisted``."""
    u = max(0.0, min(smallest_listed, unlisted))
    listed = sum(mass_by_option.values())
    absent = [o for o, m in mass_by_option.items() if m == 0.0]
    others_max = min(u * len(absent), max(unlisted, 0.0))
    out = {}
    for o, m in mass_by_option.items():
        if m > 0.0:
            out[o] = [m / (listed + others_max), m / listed]
        else:
            out[o] = [0.0, u / (listed + u)]
    return out


def parse_generation(response: Mapping[str, Any], seconds: float = 0.0) -> Generation:
    """The generated text with usage; an empty answer with ``finish_reason`` "content_filter" is an error."""
    prompt_tokens, completion_tokens = response_usage(response)
    text = response_text(response)
    finish = _choice(response).get("finish_reason")
    error = "refused: finish_reason=content_filter" if finish == "content_filter" else None
    return Generation(text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, seconds=seconds,
                      error=error)


NO_PROMPT_LOGPROBS = "endpoint does not return prompt logprobs"


def parse_echo_logprobs(response: Mapping[str, Any], context: str, continuation: str) -> TokenLogprobs:
    """Log-probs of the continuation's tokens from an echoed completions response.

    Tokens are those starting at or after the context's end, plus a token that straddles the
    boundary (BPE merges the context's last characters with the continuation's first ones).
    """
    logprobs = _choice(response).get("logprobs")
    if not isinstance(logprobs, Mapping) or not logprobs.get("token_logprobs"):
        return TokenLogprobs((), error=NO_PROMPT_LOGPROBS)
    tokens = logprobs.get("tokens") or []
    values = logprobs["token_logprobs"]
    offsets = logprobs.get("text_offset")
    if not offsets or len(offsets) != len(values):
        return TokenLogprobs((), error=f"{NO_PROMPT_LOGPROBS} (no text offsets to find the continuation)")
    boundary, total = len(context), len(context) + len(continuation)
    picked: list[float] = []
    for i, (off, lp) in enumerate(zip(offsets, values, strict=True)):
        tok_len = len(tokens[i]) if i < len(tokens) else 0
        if off >= total:  # the generated token(s) after the echoed prompt
            break
        if off + tok_len <= boundary:
            continue
        if lp is None:  # only the very first prompt token has no log-prob
            return TokenLogprobs((), error="continuation starts at the first token: it has no log-prob")
        picked.append(float(lp))
    if not picked:
        return TokenLogprobs((), error="no continuation tokens in the echoed prompt")
    return TokenLogprobs(tuple(picked))
