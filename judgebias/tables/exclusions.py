"""What a computation left out, counted by reason (and a few examples), so nothing vanishes silently."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd


@dataclass
class Exclusions:
    """Rows (or pairs) left out of a computation, counted by reason so nothing vanishes silently."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, n: int = 1, example: str | None = None) -> None:
        if n <= 0:
            return
        self.counts[reason] += n
        if example is not None:
            bucket = self.examples.setdefault(reason, [])
            if len(bucket) < 5:
                bucket.append(example)

    def add_mask(self, reason: str, mask: pd.Series, ids: pd.Series | None = None) -> None:
        n = int(mask.sum())
        if n:
            self.counts[reason] += n
            if ids is not None:
                bucket = self.examples.setdefault(reason, [])
                bucket.extend(str(x) for x in ids[mask].head(5 - len(bucket)))

    def merge(self, other: Exclusions) -> Exclusions:
        for reason, n in other.counts.items():
            self.counts[reason] += n
        for reason, ex in other.examples.items():
            bucket = self.examples.setdefault(reason, [])
            bucket.extend(ex[: max(0, 5 - len(bucket))])
        return self

    @property
    def total(self) -> int:
        return int(sum(self.counts.values()))

    def to_dict(self) -> dict[str, int]:
        return {k: int(v) for k, v in sorted(self.counts.items())}

    def __str__(self) -> str:
        if not self.counts:
            return "no exclusions"
        return ", ".join(f"{k}: {v}" for k, v in sorted(self.counts.items()))
