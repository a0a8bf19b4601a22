"""Fine-tune ablation (DBG paper Sec. 4.3): two different base models, the same instruction data.

The paper fine-tunes Llama-3.1-8B and Qwen2.5-7B on UltraChat-200k with one recipe and finds their
self-preference shrinks. Here each generator's model gets a LoRA adapter (peft) trained on the same
(instruction, response) examples, each example laid out in that model's own generation prompt
(chat template or few-shot), with the loss on the response tokens only. The merged model then
generates and judges again. Sizes are the config's: a few steps on CPU for the demo, real runs on a GPU.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from judgebias.backends.library_noise import peft_reads_deprecated_attributes
from judgebias.backends.protocol import Prompt
from judgebias.tables.files import iter_jsonl

IGNORE_INDEX = -100


@dataclass(frozen=True)
class SFTExample:
    instruction: str
    response: str


def load_sft_data(path: str | Path, n: int | None = None, seed: int = 0) -> list[SFTExample]:
    """Read ``{"instruction", "response"}`` JSONL; errors name the file and line. ``n`` draws a seeded
    sample (all rows when ``None``)."""
    path = Path(path)
    rows: list[SFTExample] = []
    for line_no, obj in iter_jsonl(path):
        for key in ("instruction", "response"):
            if not isinstance(obj.get(key), str) or not obj[key].strip():
                raise ValueError(f"{path}:{line_no}: field {key!r} must be a non-empty string")
        rows.append(SFTExample(obj["instruction"], obj["response"]))
    if not rows:
        raise ValueError(f"{path}: no training examples")
    if n is not None and n < len(rows):
        rows = random.Random(seed).sample(rows, n)
    return rows


def encode_example(tokenizer, prompt_ids: Sequence[int], response: str, max_length: int
                   ) -> tuple[list[int], list[int]]:
    """(input_ids, labels) with the prompt masked out. The prompt is tokenized by the backend exactly
    as at generation time; the response is cut (keeping the prompt's end, which holds the query and
    the answer header) to fit ``max_length`` and closed with EOS so the model learns to stop."""
    p_ids = list(prompt_ids)
    r_ids = tokenizer(response.strip(), add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id is not None:
        r_ids = [*r_ids, tokenizer.eos_token_id]
    keep_prompt = max(1, max_length // 2)
    if len(p_ids) > keep_prompt and len(p_ids) + len(r_ids) > max_length:
        p_ids = p_ids[-keep_prompt:]
    r_ids = r_ids[: max(1, max_length - len(p_ids))]
    return p_ids + r_ids, [IGNORE_INDEX] * len(p_ids) + r_ids


@dataclass
class FinetuneResult:
    adapter_dir: Path
    adapter_sha256: str
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    trainable_params: int = 0
    examples: int = 0

    def to_json(self) -> dict:
        return {"adapter_dir": str(self.adapter_dir), "adapter_sha256": self.adapter_sha256,
                "losses": self.losses, "seconds": self.seconds, "trainable_params": self.trainable_params,
                "examples": self.examples}

    @classmethod
    def from_json(cls, d: dict) -> FinetuneResult:
        return cls(Path(d["adapter_dir"]), d["adapter_sha256"], list(d["losses"]), float(d["seconds"]),
                   int(d["trainable_params"]), int(d["examples"]))


def adapter_sha256(adapter_dir: str | Path) -> str:
    digest = hashlib.sha256()
    for p in sorted(Path(adapter_dir).glob("adapter_model.*")):
        digest.update(p.read_bytes())
    return digest.hexdigest()


def lora_finetune(model, tokenizer, examples: Sequence[SFTExample], build_prompt: Callable[[str], Prompt],
                  encode: Callable[[Prompt], list[int]], out_dir: str | Path, *, r: int = 8,
                  alpha: int = 16, dropout: float = 0.05,
                  target_modules: Sequence[str] = ("q_proj", "v_proj"), steps: int = 20, lr: float = 2e-4,
                  batch_size: int = 4, max_length: int = 256, seed: int = 0,
                  progress: Callable[[int, float], None] | None = None) -> FinetuneResult:
    """Train a LoRA adapter on ``model`` in place and save it to ``out_dir``.

    ``build_prompt`` is the generator's own prompt for an instruction and ``encode`` the backend's
    tokenization of a prompt, so training sees exactly the layout generation will use.

    Returns the peft-wrapped model's adapter location, its sha256 (what identifies the fine-tuned
    weights in cache keys) and the loss of every step. ``model`` is modified (wrapped); load a fresh
    copy for anything else.
    """
    import torch
    from peft import LoraConfig, get_peft_model

    if not examples:
        raise ValueError("no training examples")
    torch.manual_seed(seed)
    encoded = [encode_example(tokenizer, encode(build_prompt(ex.instruction)), ex.response, max_length)
               for ex in examples]
    with peft_reads_deprecated_attributes():
        peft_model = get_peft_model(model, LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout,
                                                      target_modules=list(target_modules),
                                                      task_type="CAUSAL_LM"))
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.0)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    order = list(range(len(encoded)))
    rng = random.Random(seed)
    rng.shuffle(order)
    cursor = 0
    losses: list[float] = []
    start = time.perf_counter()
    peft_model.train()
    for step in range(steps):
        batch = []
        for _ in range(min(batch_size, len(encoded))):
            if cursor == len(order):
                rng.shuffle(order)
                cursor = 0
            batch.append(encoded[order[cursor]])
            cursor += 1
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.tensor([ids + [pad_id] * (width - len(ids)) for ids, _ in batch])
        labels = torch.tensor([lab + [IGNORE_INDEX] * (width - len(lab)) for _, lab in batch])
        attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch])
        loss = peft_model(input_ids=input_ids.to(model.device), attention_mask=attention.to(model.device),
                          labels=labels.to(model.device)).loss
        if not math.isfinite(loss.item()):
            raise RuntimeError(f"LoRA fine-tuning diverged at step {step + 1}: loss {loss.item()}")
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.item()))
        if progress:
            progress(step + 1, losses[-1])
    peft_model.eval()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(out_dir))
    return FinetuneResult(adapter_dir=out_dir, adapter_sha256=adapter_sha256(out_dir), losses=losses,
                          seconds=time.perf_counter() - start,
                          trainable_params=int(sum(p.numel() for p in trainable)), examples=len(encoded))


def merge_adapter(model, adapter_dir: str | Path):
    """The base ``model`` with a saved LoRA adapter merged in (a plain transformers model again)."""
    from peft import PeftModel

    with peft_reads_deprecated_attributes():
        merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    merged.eval()
    return merged
