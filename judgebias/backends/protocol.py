"""The one small interface every model backend implements.

A backend is anything that can (1) score a fixed set of answer options after a prompt, (2)
generate text, and (3) give the log-probabilities of a continuation's tokens given a context.
Local models add attention summaries. Prompts are ``Prompt`` values: chat messages for models
with a chat template and for API models, or raw text for base models (few-shot prompts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol, runtime_checkable

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True)
class Prompt:
    """Either chat ``messages`` or raw ``text`` (exactly one).

    ``assistant_prefix`` is text the answer must start with (e.g. "[[" after an explanation):
    appended after the chat template's assistant header, or after ``text``.
    """

    messages: tuple[Message, ...] = ()
    text: str | None = None
    assistant_prefix: str = ""

    def __post_init__(self) -> None:
        if bool(self.messages) == (self.text is not None):
            raise ValueError("a Prompt has either chat messages or raw text, not both or neither")

    @classmethod
    def chat(cls, *pairs: tuple[Role, str], assistant_prefix: str = "") -> Prompt:
        return cls(messages=tuple(Message(r, c) for r, c in pairs), assistant_prefix=assistant_prefix)

    @classmethod
    def raw(cls, text: str, assistant_prefix: str = "") -> Prompt:
        return cls(text=text, assistant_prefix=assistant_prefix)

    def key(self) -> dict:
        """Content of this prompt for cache keys."""
        return {"messages": [[m.role, m.content] for m in self.messages], "text": self.text,
                "prefix": self.assistant_prefix}


# Deliberate parallel: a frozen record of defaulted numbers, shaped like other such records
# (annotation's selection weights and upsert counts); nothing to share but the shape.
@dataclass(frozen=True)
class GenerationParams:
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()

    def key(self) -> dict:
        return {**asdict(self), "stop": list(self.stop)}


@dataclass(frozen=True)
class OptionScores:
    """Probabilities of each option label at the answer position, normalized over the options.

    ``probs`` maps option label ("A", "B", ...) to probability; NaN for all when none of the
    options appears (an API's top-logprobs without either token). ``mass`` is the unnormalized
    total probability the options had, a measure of how on-format the judge was.
    ``verdict_only`` marks scores read from the answer text of an endpoint that returns no
    log-probabilities: probs are then 1/0 (0.5/0.5 for a tie verdict), a verdict, not a
    probability, so they must not be averaged as one.
    ``bounds`` (option -> [low, high]) replaces ``probs`` (all NaN) when an option fell outside an
    endpoint's top log-probabilities: its probability is then only known to lie below the
    smallest listed one, so each option's normalized probability is an interval, not a value.
    """

    probs: dict[str, float]
    mass: float = math.nan
    raw: str = ""
    error: str | None = None
    verdict_only: bool = False
    bounds: dict[str, list[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class TokenLogprobs:
    """Log-probabilities of each token of a continuation given its context."""

    logprobs: tuple[float, ...]
    error: str | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.logprobs)

    @property
    def perplexity(self) -> float:
        if not self.logprobs:
            return math.nan
        return math.exp(-sum(self.logprobs) / len(self.logprobs))


@dataclass(frozen=True)
class AttentionSummary:
    """Mean attention per layer that the last prompt token pays to each marked span of tokens."""

    per_layer: dict[str, tuple[float, ...]] = field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    """What a judge or generator model must offer."""

    name: str

    def identity(self) -> dict:
        """Everything that determines this backend's outputs (for cache keys): kind, model id and
        revision or weights hash, endpoint. Never secrets, retries, timeouts or concurrency."""
        ...

    def score_options(self, prompts: Sequence[Prompt], options: Sequence[str]) -> list[OptionScores]: ...

    def generate(self, prompts: Sequence[Prompt], params: GenerationParams) -> list[Generation]: ...

    def continuation_logprobs(self, contexts: Sequence[Prompt], continuations: Sequence[str]
                              ) -> list[TokenLogprobs]: ...
