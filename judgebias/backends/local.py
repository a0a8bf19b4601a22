"""A local transformers model as a judge/generator backend.

Speed without changing results: prompts are scored in length-sorted batches sized by a token
budget (little padding), right-padded so every real token sees exactly what it would see alone,
and only the hidden state at each row's last real token goes through the output layer. Generation
is batched with left padding. fp32 on CPU, bf16 on CUDA, SDPA attention (eager only while
attention weights are requested).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from judgebias.backends.kv_cache import returned_cache, with_cache
from judgebias.backends.loading import LoadedModel, load_model
from judgebias.backends.prompt_tokens import PromptTokens
from judgebias.backends.protocol import (
    Generation,
    GenerationParams,
    OptionScores,
    Prompt,
    TokenLogprobs,
)
from judgebias.backends.token_batching import (
    attention_window,
    common_prefix,
    pair_groups,
    token_batches,
)

# Architectures whose DynamicCache + explicit position ids reproduce a full forward pass (checked
# by tests); others are scored without prefix reuse. A model with a sliding-window attention
# (gemma3's 5-of-6 local layers, mistral v0.1) reuses prefixes only for prompts that fit the
# window, where windowed and full attention see the same tokens.
PREFIX_REUSE_TYPES = {"llama", "qwen2", "qwen3", "mistral", "phi3", "gemma3_text"}
MIN_SHARED_PREFIX = 16

class LocalBackend(PromptTokens):
    """A transformers causal LM (alias, folder, GGUF or hub id; see ``judgebias.backends.loading``)."""

    def __init__(self, model: str | LoadedModel = "smollm2-135m-instruct", *, name: str | None = None,
                 device: str | None = None, dtype=None, gguf_file: str | None = None,
                 token_budget: int | None = None, max_batch: int = 64, reuse_prefix: bool = True):
        self.loaded = model if isinstance(model, LoadedModel) else load_model(
            model, gguf_file=gguf_file, device=device, dtype=dtype)
        if self.loaded.tokenizer is None:
            raise ValueError(f"model {self.loaded.name!r} has no tokenizer")
        self.model = self.loaded.model
        self.tokenizer = self.loaded.tokenizer
        self.name = name or self.loaded.name
        self.device = next(self.model.parameters()).device
        on_gpu = self.device.type == "cuda"
        # Scoring is one forward pass per batch: on 2 CPU cores 1024-token batches beat 4096
        # (cache-friendlier, less padding); the GPU needs large batches to fill it.
        self.token_budget = token_budget or (65536 if on_gpu else 1024)
        # Generation is mostly decode steps, each reading every weight once however many rows it
        # advances: wider batches share that read. Measured on 2 cores in bf16, 8 few-shot prompts of
        # ~370 tokens + 64 new: 7.7 s in one batch (4096) against 13.3 s in four (1024) for gemma-3,
        # 4.3 s against 7.1 s for SmolLM2. A budget the caller sets bounds both.
        self.generation_budget = token_budget or (65536 if on_gpu else 4096)
        self.max_batch = max_batch
        model_type = getattr(self.model.config, "model_type", "")
        self.reuse_prefix = reuse_prefix and model_type in PREFIX_REUSE_TYPES
        self.window = attention_window(self.model.config)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.tokenizer.eos_token_id or 0)
        self.max_positions = getattr(self.model.config, "max_position_embeddings", None) or 1 << 30
        self.softcap = getattr(self.model.config, "final_logit_softcapping", None)

    # ---------------------------------------------------------------- identity and text
    def identity(self) -> dict:
        ident = {"backend": "local", **self.loaded.identity}
        template = getattr(self.tokenizer, "chat_template", None)
        if template:
            # The chat template shapes every rendered prompt; a folder's weights hash does not cover it.
            ident["chat_template_sha256"] = hashlib.sha256(str(template).encode()).hexdigest()[:16]
        return ident

    @property
    def is_chat(self) -> bool:
        return self.loaded.is_chat

    # ---------------------------------------------------------------- forward passes
    def _body(self):
        return self.model.get_decoder()

    def _logits(self, hidden):
        import torch

        logits = self.model.get_output_embeddings()(hidden).float()
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def _hidden(self, rows: list[list[int]], prefix: tuple[int, Any] | None = None):
        """Right-padded forward pass of the decoder body: (hidden [n, T, d], lengths).

        With ``prefix`` = (P, cache of the first P tokens every row shares), only each row's
        tokens after P are computed, attending to the cached prefix; hidden states and lengths
        then refer to those suffixes.
        """
        import copy

        import torch

        start = prefix[0] if prefix else 0
        lengths = [len(r) - start for r in rows]
        width = max(lengths)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), start + width), dtype=torch.long)
        mask[:, :start] = 1
        for i, r in enumerate(rows):
            ids[i, : lengths[i]] = torch.tensor(r[start:], dtype=torch.long)
            mask[i, start: start + lengths[i]] = 1
        kwargs: dict[str, Any] = {"use_cache": False}
        if prefix:
            cache = copy.deepcopy(prefix[1])
            cache.batch_repeat_interleave(len(rows))
            positions = torch.arange(start, start + width, device=self.device)[None].expand(len(rows), -1)
            kwargs = {"use_cache": True, **with_cache(self._body(), cache), "position_ids": positions}
        out = self._body()(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **kwargs)
        return out.last_hidden_state, lengths

    def _reuse_for(self, rows: list[list[int]]) -> bool:
        return self.reuse_prefix and (self.window is None or max(map(len, rows), default=0) <= self.window)

    def _shared_prefix(self, rows: list[list[int]]) -> tuple[int, Any] | None:
        """(P, KV cache) of the token prefix all ``rows`` share (a template's instructions, few-shot
        examples), computed once instead of once per row; None when too short to pay off."""
        import torch

        if not self._reuse_for(rows) or len(rows) < 2:
            return None
        size = common_prefix(rows, 0, min(len(r) for r in rows) - 1)  # each row keeps >= 1 own token
        if size < MIN_SHARED_PREFIX:
            return None
        out = self._body()(input_ids=torch.tensor([rows[0][:size]], device=self.device), use_cache=True)
        return size, returned_cache(out)

    def _last_hidden(self, rows: list[list[int]], prefix: tuple[int, Any] | None):
        """Hidden state at each row's last token [n, d], reusing shared prefixes when possible."""
        import torch

        start = prefix[0] if prefix else 0
        groups = pair_groups(rows, start, MIN_SHARED_PREFIX) if self._reuse_for(rows) else None
        if groups is None:
            hidden, lengths = self._hidden(rows, prefix)
            last = torch.tensor(lengths, device=self.device) - 1
            return hidden[torch.arange(len(rows), device=self.device), last]
        return self._grouped_last_hidden(rows, prefix, groups)

    def _grouped_last_hidden(self, rows: list[list[int]], prefix: tuple[int, Any] | None,
                             groups: list[tuple[list[int], int]]):
        """Two steps: each group's shared tokens once (after the global prefix), then every row's
        own tokens attending to [global prefix | its group's tokens | itself]; other groups' and
        padding positions are masked, and position ids continue each row's own sequence."""
        import copy

        import torch

        dev = self.device
        start = prefix[0] if prefix else 0
        shared = [(members, size) for members, size in groups if size]
        width_g = max(size for _, size in shared)
        g_ids = torch.full((len(shared), width_g), self.pad_id, dtype=torch.long)
        g_mask = torch.zeros((len(shared), start + width_g), dtype=torch.long)
        g_mask[:, :start] = 1
        group_of: dict[int, tuple[int, int]] = {}
        for k, (members, size) in enumerate(shared):
            g_ids[k, :size] = torch.tensor(rows[members[0]][start: start + size], dtype=torch.long)
            g_mask[k, start: start + size] = 1
            for m in members:
                group_of[m] = (k, size)
        kwargs: dict[str, Any] = {"use_cache": True}
        if prefix:
            cache = copy.deepcopy(prefix[1])
            cache.batch_repeat_interleave(len(shared))
            kwargs.update(with_cache(self._body(), cache))
        g_pos = torch.arange(start, start + width_g, device=dev)[None].expand(len(shared), -1)
        step = self._body()(input_ids=g_ids.to(dev), attention_mask=g_mask.to(dev), position_ids=g_pos,
                            **kwargs)
        group_cache = returned_cache(step)

        n = len(rows)
        owner = [group_of.get(i, (0, 0)) for i in range(n)]  # no group: any cache row, fully masked
        lengths = [len(r) - start - owner[i][1] for i, r in enumerate(rows)]
        width = max(lengths)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, start + width_g + width), dtype=torch.long)
        mask[:, :start] = 1
        pos = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(rows):
            size = owner[i][1]
            ids[i, : lengths[i]] = torch.tensor(r[start + size:], dtype=torch.long)
            mask[i, start: start + size] = 1
            mask[i, start + width_g: start + width_g + lengths[i]] = 1
            pos[i] = torch.arange(start + size, start + size + width)
        cache = copy.deepcopy(group_cache)
        cache.batch_select_indices(torch.tensor([k for k, _ in owner], device=dev))
        out = self._body()(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev),
                           **with_cache(self._body(), cache), use_cache=True)
        return out.last_hidden_state[torch.arange(n, device=dev), torch.tensor(lengths, device=dev) - 1]

    def _too_long(self, n_tokens: int) -> str | None:
        if n_tokens > self.max_positions:
            return f"prompt of {n_tokens} tokens exceeds the model's context of {self.max_positions}"
        return None

    def score_options(self, prompts: Sequence[Prompt], options: Sequence[str],
                      progress: Callable[[int], None] | None = None,
                      on_results: Callable[[dict[int, OptionScores]], None] | None = None
                      ) -> list[OptionScores]:
        """P(option) at the next token of each prompt, summed over the option's token variants.
        ``on_results`` gets each forward pass's results by prompt index (the call cache commits them)."""
        import torch

        variants = self.variants(options)
        encoded = [self.encode(p) for p in prompts]
        results: list[OptionScores | None] = [None] * len(prompts)
        todo = []
        for i, ids in enumerate(encoded):
            problem = self._too_long(len(ids)) or (None if ids else "empty prompt")
            if problem:
                results[i] = OptionScores(probs={o: math.nan for o in options}, error=problem)
            else:
                todo.append(i)
        # Identical prompts (e.g. a pair whose two responses are equal) are computed once.
        unique: dict[tuple[int, ...], int] = {}
        for i in todo:
            unique.setdefault(tuple(encoded[i]), i)
        reps = list(unique.values())
        computed: dict[int, OptionScores] = {}
        copies: dict[int, list[int]] = {}
        for i in todo:
            copies.setdefault(unique[tuple(encoded[i])], []).append(i)
        index_tensors = {o: torch.tensor(ids, device=self.device) for o, ids in variants.items()}
        with torch.inference_mode():
            prefix = self._shared_prefix([encoded[i] for i in reps])
            skip = prefix[0] if prefix else 0
            for batch in token_batches([len(encoded[i]) - skip for i in reps], self.token_budget,
                                       self.max_batch):
                rows = [encoded[reps[j]] for j in batch]
                last = self._last_hidden(rows, prefix)
                probs = torch.softmax(self._logits(last), dim=-1)
                per_option = torch.stack([probs[:, index_tensors[o]].sum(-1) for o in options], dim=-1)
                top = probs.argmax(-1).tolist()
                per_option = per_option.double().cpu().tolist()
                for k, j in enumerate(batch):
                    mass = sum(per_option[k])
                    norm = {o: (p / mass if mass > 0 else math.nan)
                            for o, p in zip(options, per_option[k], strict=True)}
                    computed[reps[j]] = OptionScores(probs=norm, mass=mass,
                                                     raw=self.tokenizer.decode([top[k]]))
                if progress:
                    progress(len(batch))
                if on_results:
                    on_results({i: computed[reps[j]] for j in batch for i in copies[reps[j]]})
        for i in todo:
            results[i] = computed[unique[tuple(encoded[i])]]
        return results  # type: ignore[return-value]

    def continuation_logprobs(self, contexts: Sequence[Prompt], continuations: Sequence[str],
                              on_results: Callable[[dict[int, TokenLogprobs]], None] | None = None
                              ) -> list[TokenLogprobs]:
        """Log-probability of each continuation token given the rendered context and the tokens before it."""
        import torch

        ctx, cont, results, todo = self.continuation_tokens(contexts, continuations, self._too_long)
        with torch.inference_mode():
            for batch in token_batches([len(ctx[todo[j]]) + len(cont[todo[j]]) for j in range(len(todo))],
                                       self.token_budget, self.max_batch):
                idx = [todo[j] for j in batch]
                hidden, _ = self._hidden([ctx[i] + cont[i] for i in idx])
                for k, i in enumerate(idx):
                    start = len(ctx[i]) - 1  # the position that predicts the first continuation token
                    h = hidden[k, start: start + len(cont[i])]
                    logp = torch.log_softmax(self._logits(h), dim=-1)
                    target = torch.tensor(cont[i], device=self.device)
                    picked = logp.gather(1, target[:, None])[:, 0].double().cpu().tolist()
                    results[i] = TokenLogprobs(tuple(picked))
                if on_results:
                    on_results({i: results[i] for i in idx})
        return results  # type: ignore[return-value]

    # ---------------------------------------------------------------- generation
    def generate(self, prompts: Sequence[Prompt], params: GenerationParams,
                 progress: Callable[[int], None] | None = None,
                 on_results: Callable[[dict[int, Generation]], None] | None = None) -> list[Generation]:
        """Batched generation (left padding); greedy when temperature is 0.

        With sampling, a batch shares one seeded random stream, so a text depends on which prompts
        it was batched with; greedy output does not.
        """
        encoded = [self.encode(p) for p in prompts]
        results: list[Generation | None] = [None] * len(prompts)
        todo = []
        for i, ids in enumerate(encoded):
            problem = self._too_long(len(ids) + params.max_new_tokens) or (None if ids else "empty prompt")
            if problem:
                results[i] = Generation(text="", error=problem)
            else:
                todo.append(i)
        eos = self._eos_ids()
        budget = max(self.generation_budget, 1)
        lengths = [len(encoded[i]) + params.max_new_tokens for i in todo]
        for batch in token_batches(lengths, budget, self.max_batch):
            idx = [todo[j] for j in batch]
            start = time.perf_counter()
            texts, n_new = self._generate_batch([encoded[i] for i in idx], params, eos)
            seconds = (time.perf_counter() - start) / len(idx)
            for k, i in enumerate(idx):
                results[i] = Generation(text=texts[k], prompt_tokens=len(encoded[i]),
                                        completion_tokens=n_new[k], seconds=seconds)
            if progress:
                progress(len(idx))
            if on_results:
                on_results({i: results[i] for i in idx})
        return results  # type: ignore[return-value]

    def _eos_ids(self) -> list[int]:
        ids = set()
        configured = getattr(self.model.generation_config, "eos_token_id", None)
        for source in (self.tokenizer.eos_token_id, configured):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(source)
        for token in ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>"):
            tid = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(tid, int) and tid != self.tokenizer.unk_token_id and tid < len(self.tokenizer):
                ids.add(tid)
        return sorted(ids)

    def _generate_batch(self, rows: list[list[int]], params: GenerationParams, eos: list[int]
                        ) -> tuple[list[str], list[int]]:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
        tokenizer = self.tokenizer
        stops = params.stop

        class _Stop(StoppingCriteria):
            # Per-row check of the decoded tail, so one row's stop string ends only that row.
            def __call__(self, input_ids, scores, **kwargs):
                tail = input_ids[:, width:][:, -16:].tolist()
                texts = tokenizer.batch_decode(tail, skip_special_tokens=True)
                return torch.tensor([any(s in t for s in stops) for t in texts], device=input_ids.device)

        kwargs: dict[str, Any] = dict(max_new_tokens=params.max_new_tokens, pad_token_id=self.pad_id,
                                      eos_token_id=eos, attention_mask=mask.to(self.device))
        if params.temperature > 0:
            torch.manual_seed(params.seed)
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if stops:
            kwargs["stopping_criteria"] = StoppingCriteriaList([_Stop()])
        with torch.inference_mode():
            out = self.model.generate(ids.to(self.device), **kwargs)
        new = out[:, width:].tolist()
        texts, counts = [], []
        eos_set = set(eos)
        for row in new:
            n = next((k for k, t in enumerate(row) if t in eos_set), len(row))
            text = tokenizer.decode(row[:n], skip_special_tokens=True)
            cut = min((text.find(s) for s in stops if s in text), default=-1)
            texts.append(text[:cut] if cut >= 0 else text)
            counts.append(n)
        return texts, counts
