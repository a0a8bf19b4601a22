"""A prompt as the exact tokens a model reads, shared by the backends that tokenize themselves (the
in-process engine and the vLLM worker, which is handed token ids so that both read the same tokens).

The class using ``PromptTokens`` provides ``tokenizer``, ``name`` and ``is_chat``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from judgebias.backends.protocol import Prompt, TokenLogprobs
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

    def continuation_tokens(self, contexts: Sequence[Prompt], continuations: Sequence[str],
                            too_long: Callable[[int], str | None] = lambda n: None
                            ) -> tuple[list[list[int]], list[list[int]], list[TokenLogprobs | None],
                                       list[int]]:
        """The token ids of each context and continuation, the results with an error where a pair
        cannot be scored (empty, or ``too_long(total tokens)`` says why), and the indices to score."""
        if len(contexts) != len(continuations):
            raise ValueError(f"{len(contexts)} contexts but {len(continuations)} continuations")
        ctx = [self.encode(c) for c in contexts]
        cont = [self.tokenizer(c, add_special_tokens=False).input_ids for c in continuations]
        results: list[TokenLogprobs | None] = [None] * len(contexts)
        todo = []
        for i in range(len(contexts)):
            problem = ("empty continuation" if not cont[i] else "empty context" if not ctx[i]
                       else too_long(len(ctx[i]) + len(cont[i])))
            if problem:
                results[i] = TokenLogprobs((), error=problem)
            else:
                todo.append(i)
        return ctx, cont, results, todo
