"""What an OpenAI-compatible endpoint's calls cost: one record per HTTP call that produced a result,
a price per model, and the totals a run reports (``judgebias judge``, ``judgebias bench --endpoint``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CallUsage:
    """One HTTP call that produced a result."""

    operation: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    tries: int
    cost_usd: float = math.nan


@dataclass(frozen=True)
class Price:
    """USD per one million input / output tokens."""

    input_per_1m: float
    output_per_1m: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_1m + completion_tokens * self.output_per_1m) / 1e6


def usage_totals(log: Sequence[CallUsage]) -> dict[str, float]:
    """Calls, tokens, seconds (summed), tries and cost (NaN where a call had no price; 0 without calls)."""
    return {"calls": len(log), "prompt_tokens": sum(u.prompt_tokens for u in log),
            "completion_tokens": sum(u.completion_tokens for u in log),
            "seconds": sum(u.seconds for u in log), "tries": sum(u.tries for u in log),
            "cost_usd": sum(u.cost_usd for u in log) if log else 0.0}
