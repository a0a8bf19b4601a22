"""Versioned prompt templates.

A template turns (query, first response, second response) into a backend ``Prompt``: chat
messages for post-trained models with a chat template, raw few-shot text for pre-trained (base)
models. Its ``tag(chat)`` (name, version and variant) is stored in every judgment record and in
the cache key, so changing a template's text must bump its ``version``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from judgebias.backends.protocol import Prompt


@dataclass(frozen=True)
class JudgeTemplate:
    """A pairwise judging prompt.

    ``options`` are the labels the judge answers with, in prompt order (first shown = "A").
    ``explain_first`` templates let the judge write an explanation and then a verdict in
    ``[[A]]``-style brackets; the others expect the option letter as the answer's first token.
    ``markers`` are the texts that open the first and second response in the prompt (used to
    find the responses' token spans for attention summaries).
    """

    name: str
    version: str
    description: str
    options: tuple[str, ...]
    explain_first: bool
    markers: tuple[str, str]
    chat_builder: Callable[[str, str, str], Prompt] | None
    raw_builder: Callable[[str, str, str], Prompt] | None
    source: str = ""

    def tag(self, chat: bool) -> str:
        return f"{self.name}@{self.version}:{'chat' if chat else 'fewshot'}"

    def build(self, query: str, first: str, second: str, *, chat: bool = True) -> Prompt:
        builder = self.chat_builder if chat else self.raw_builder
        if builder is None:
            kind = "chat" if chat else "pre-trained (few-shot, no chat template)"
            raise ValueError(f"template {self.name!r} has no {kind} variant")
        return builder(query, first, second)


@dataclass(frozen=True)
class GenerationTemplate:
    """A prompt that asks a model to answer a query (for responses to be judged later)."""

    name: str
    version: str
    description: str
    chat_builder: Callable[[str], Prompt]
    raw_builder: Callable[[str], Prompt]
    raw_stop: tuple[str, ...] = ()
    source: str = ""

    def tag(self, chat: bool) -> str:
        return f"{self.name}@{self.version}:{'chat' if chat else 'fewshot'}"

    def build(self, query: str, *, chat: bool = True) -> Prompt:
        return (self.chat_builder if chat else self.raw_builder)(query)

    def stop(self, chat: bool) -> tuple[str, ...]:
        """Stop strings: a base model continuing a few-shot prompt writes the next "# Query"."""
        return () if chat else self.raw_stop
