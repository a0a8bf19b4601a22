"""What a judging run will cost before it runs, and what it cost after.

``PRICES``: USD per million input / output tokens of judge-class API models, as the providers'
price pages listed them (mid-2025, standard tier, no batch or cache discount). Prices change: a
user's own table (``--prices FILE.yaml``: ``{model: [input, output]}``) or one price
(``--price-per-mtok IN,OUT``) replaces them. A model is found by its exact name, else by the
longest listed name it starts with (``gpt-4o-mini-2024-07-18`` is ``gpt-4o-mini``).

``count_prompt_tokens``: a chat prompt's tokens as an OpenAI-compatible endpoint bills them. With
the judge's tokenizer: its chat template's rendering when it has one (what vLLM and other servers
of that model read), else the messages' tokens plus 3 a message and 3 for the reply (OpenAI's
documented count); without one, 4 characters a token, stated as an estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from judgebias.backends.endpoint_usage import Price
from judgebias.backends.protocol import Prompt

PRICES_AS_OF = "mid-2025 list prices, standard tier"
PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "gpt-3.5-turbo": Price(0.50, 1.50),
    "o3-mini": Price(1.10, 4.40),
    "claude-3-5-haiku": Price(0.80, 4.00),
    "claude-3-5-sonnet": Price(3.00, 15.00),
    "claude-sonnet-4": Price(3.00, 15.00),
}
MESSAGE_OVERHEAD = 3
REPLY_PRIMING = 3
CHARS_PER_TOKEN = 4


def parse_price(text: str) -> Price:
    """``"IN,OUT"`` (USD per million input, output tokens) as a ``Price``; ``ValueError`` otherwise."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) != 2 or any(not (0 <= x < math.inf) for x in numbers):
        raise ValueError(f"expected IN,OUT: two prices >= 0 in USD per million tokens, got {text!r}")
    return Price(*numbers)


def read_price_table(path: str | Path) -> dict[str, Price]:
    """A YAML file ``{model: [input, output]}`` (USD per million tokens)."""
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"price table {path}: cannot read it ({exc})") from None
    if not isinstance(doc, dict) or not doc:
        raise ValueError(f"price table {path}: expected a mapping model: [input, output]")
    out = {}
    for model, value in doc.items():
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise ValueError(f"price table {path}: {model!r} needs [input, output] USD per million tokens")
        try:
            out[str(model)] = parse_price(",".join(str(v) for v in value))
        except ValueError as exc:
            raise ValueError(f"price table {path}: {model!r}: {exc}") from None
    return out


def price_for(model: str, table: Mapping[str, Price] | None = None) -> tuple[str, Price] | None:
    """(the listed name, its price) for ``model``: exact, else the longest listed prefix; None."""
    table = PRICES if table is None else table
    if model in table:
        return model, table[model]
    matches = [name for name in table if model.startswith(name)]
    if not matches:
        return None
    best = max(matches, key=len)
    return best, table[best]


def count_prompt_tokens(prompts: Sequence[Prompt], tokenizer: Any = None) -> list[int]:
    """Each prompt's tokens as an endpoint bills them (see the module's docstring)."""
    out = []
    for p in prompts:
        if tokenizer is None:
            if p.text is not None:
                out.append(math.ceil(len(p.text + p.assistant_prefix) / CHARS_PER_TOKEN))
            else:
                out.append(sum(math.ceil(len(m.content) / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD
                               for m in p.messages) + REPLY_PRIMING
                           + math.ceil(len(p.assistant_prefix) / CHARS_PER_TOKEN))
            continue
        if p.text is not None:
            out.append(len(tokenizer(p.text + p.assistant_prefix).input_ids))
        elif getattr(tokenizer, "chat_template", None):
            messages = [{"role": m.role, "content": m.content} for m in p.messages]
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            out.append(len(tokenizer(text + p.assistant_prefix, add_special_tokens=False).input_ids))
        else:
            out.append(sum(len(tokenizer(m.content, add_special_tokens=False).input_ids) + MESSAGE_OVERHEAD
                           for m in p.messages) + REPLY_PRIMING
                       + len(tokenizer(p.assistant_prefix, add_special_tokens=False).input_ids))
    return out


@dataclass(frozen=True)
class CostEstimate:
    """The calls a run will make (those not in the call cache; an item repeated in the input is
    sent once: ``cached`` counts both), their prompt tokens, the most output tokens they may
    produce, and the cost at ``price`` (None without one)."""

    calls: int
    cached: int
    prompt_tokens: int
    max_completion_tokens: int
    counted_with: str
    price_model: str | None = None
    usd_per_mtok_in: float | None = None
    usd_per_mtok_out: float | None = None

    @property
    def usd(self) -> float | None:
        if self.usd_per_mtok_in is None or self.usd_per_mtok_out is None:
            return None
        return Price(self.usd_per_mtok_in, self.usd_per_mtok_out).cost(self.prompt_tokens,
                                                                      self.max_completion_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "usd": self.usd}

    def text(self) -> str:
        cost = (f"at most ${self.usd:.4f} (prompt tokens at ${self.usd_per_mtok_in}/M, at most "
                f"{self.max_completion_tokens} output tokens at ${self.usd_per_mtok_out}/M; price of "
                f"{self.price_model})" if self.usd is not None
                else "cost unknown: no price for this model (--price-per-mtok IN,OUT or --prices FILE)")
        return (f"before judging: {self.calls} calls to make ({self.cached} answered by the call cache or "
                f"repeating another item), "
                f"{self.prompt_tokens} prompt tokens ({self.counted_with}); {cost}")


def estimate(prompt_tokens: Sequence[int], max_completion_per_call: int, *, cached: int = 0,
             counted_with: str, price: tuple[str, Price] | None = None) -> CostEstimate:
    if max_completion_per_call < 0 or any(t < 0 for t in prompt_tokens):
        raise ValueError("token counts must be >= 0")
    name, p = price if price is not None else (None, None)
    return CostEstimate(calls=len(prompt_tokens), cached=cached, prompt_tokens=int(sum(prompt_tokens)),
                        max_completion_tokens=len(prompt_tokens) * max_completion_per_call,
                        counted_with=counted_with, price_model=name,
                        usd_per_mtok_in=p.input_per_1m if p else None,
                        usd_per_mtok_out=p.output_per_1m if p else None)


def per_thousand(totals: Mapping[str, float], judgments: int, seconds: float) -> dict[str, float | None]:
    """Seconds, dollars and tokens per 1,000 judgments (a pair judged in both orders) from a run's
    totals; dollars None where any call had no price."""
    if judgments <= 0:
        raise ValueError(f"judgments must be > 0, got {judgments}")
    scale = 1000.0 / judgments
    usd = totals.get("cost_usd")
    return {"seconds_per_1000": seconds * scale,
            "usd_per_1000": None if usd is None or math.isnan(usd) else usd * scale,
            "prompt_tokens_per_1000": totals.get("prompt_tokens", 0) * scale,
            "completion_tokens_per_1000": totals.get("completion_tokens", 0) * scale}
