"""``judge --repeats K``: every pair judged K times, for the repeat-run noise of a sampling judge.

Repeat r runs the one judging engine (``engine.pairwise.judge_pairs``) with ``GenerationParams.seed = r``:
the call cache keys a generation by its parameters, so each repeat is a distinct call (a sampling
judge draws afresh: the seed reaches the local and vLLM samplers) that a rerun reads from the cache.
The first repeat is the table the command writes anyway; the K folded verdicts go into the list
column ``repeat_verdicts`` (``judgebias.metrics.repeats`` reads it).

A log-probability read (a template that answers in one token, P(A) from its probabilities) samples
nothing: it is deterministic. Its repeats are then read again past the cache from the model itself,
and the command reports whether they were identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from judgebias.backends.protocol import GenerationParams
from judgebias.engine.pairwise import judge_pairs
from judgebias.metrics.repeats import REPEATS_COLUMN

# Two reads of one probability differ by batch composition in the last bits (float32 sums): not a
# different judgment.
SAME_P_TOLERANCE = 1e-4


@dataclass(frozen=True)
class RepeatCheck:
    """For a log-probability read: whether the repeats gave identical verdicts and P(A)."""

    deterministic: bool  # the template reads probabilities (no sampling)
    repeats: int
    verdicts_changed: int = 0
    max_p_difference: float = 0.0

    def line(self) -> str:
        if not self.deterministic:
            return f"{self.repeats} repeats of a generating judge; their agreement: judgebias analyze"
        same = self.verdicts_changed == 0 and self.max_p_difference <= SAME_P_TOLERANCE
        return (
            f"log-probability read: deterministic, no sampling; {self.repeats} repeats read past the cache "
            f"{'are identical' if same else 'DIFFER'} ({self.verdicts_changed} verdict(s) changed, largest "
            f"P(A) difference {self.max_p_difference:.2g})"
        )


def repeated(
    first: pd.DataFrame,
    pairs: Sequence,
    backend,
    template,
    *,
    judge: str,
    chat: bool | None,
    params: GenerationParams,
    repeats: int,
    chunk_size: int,
) -> tuple[pd.DataFrame, RepeatCheck]:
    """``first`` (the judged table of repeat 0) with ``repeat_verdicts``: the folded verdict of each
    of the ``repeats`` runs per pair. ``backend``: the cached runner (a log-probability read goes to
    its ``inner`` model for repeats 1..K-1)."""
    if repeats < 2:
        raise ValueError(f"--repeats must be at least 2 to measure repeat noise, got {repeats}")
    deterministic = not template.explain_first
    runner = getattr(backend, "inner", backend) if deterministic else backend
    by_pair = {pid: [v] for pid, v in zip(first["pair_id"], first["verdict"], strict=True)}
    p_first = dict(zip(first["pair_id"], first["p_a"], strict=True)) if "p_a" in first else {}
    changed, largest = 0, 0.0
    for r in range(1, repeats):
        table = judge_pairs(
            pairs,
            runner,
            template,
            judge=judge,
            chat=chat,
            chunk_size=chunk_size,
            params=GenerationParams(
                max_new_tokens=params.max_new_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                seed=params.seed + r,
            ),
        ).table()
        seen = set()
        for pid, v, p in zip(
            table["pair_id"], table["verdict"], table.get("p_a", [np.nan] * len(table)), strict=True
        ):
            if pid not in by_pair or pid in seen:
                continue
            seen.add(pid)
            by_pair[pid].append(v)
            changed += int(v != by_pair[pid][0])
            if pid in p_first and not (np.isnan(p) or np.isnan(p_first[pid])):
                largest = max(largest, abs(float(p) - float(p_first[pid])))
        for pid in by_pair.keys() - seen:  # no verdict this time (off-format): a missing repeat
            by_pair[pid].append(None)
    out = first.copy()
    out[REPEATS_COLUMN] = [
        [v if isinstance(v, str) else None for v in by_pair[pid]] for pid in out["pair_id"]
    ]
    return out, RepeatCheck(
        deterministic, repeats, changed if deterministic else 0, largest if deterministic else 0.0
    )
