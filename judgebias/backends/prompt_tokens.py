"""A prompt as the exact tokens a model reads, shared by the backends that tokenize themselves (the
in-process engine and the vLLM worker, which is handed token ids so that both read the same tokens).

The class using ``PromptTokens`` provides ``tokenizer``, ``name`` and ``is_chat``.
"""

from __future__ import annotations

from collections.abc import Sequence

from judgebias.backends.protocol import Prompt
from judgebias.backends.token_batching import option_variants


class PromptTokens:
    """``render``/``encode`` a prompt and the options' token variants (memoised per option set)."""

    tokenizer: object
    name: str
    is_chat: bool

    def render(self, prompt: Prompt) -> str:
        """The exact text the model reads (chat template applied, answer prefix appended)."""
        if prompt.text is not None:
            return prompt.text + prompt.assistant_prefix
        if not self.is_chat:
            raise ValueError(f"model {self.name!r} has no chat template: give it a raw (few-shot) prompt")
        messages = [{"role": m.role, "content": m.content} for m in prompt.messages]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return text + prompt.assistant_prefix

    def encode(self, prompt: Prompt) -> list[int]:
        # A chat template writes its own BOS as text; raw text gets the tokenizer's usual specials.
        return self.tokenizer(self.render(prompt), add_special_tokens=prompt.text is not None).input_ids

    def variants(self, options: Sequence[str]) -> dict[str, list[int]]:
        key = tuple(options)
        cache = self.__dict__.setdefault("_variants", {})
        if key not in cache:
            cache[key] = option_variants(self.tokenizer, key)
        return cache[key]
