"""Typed, immutable records that flow through the pipeline.

A ``Pair`` is what gets judged. A ``Judgment`` is one judge's answer to one presentation order of
one pair: everything needed to audit it (template version, raw output, option probabilities,
error). ``combine_orders`` folds the two orders of a (pair, judge) into one judgment-table row.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from judgebias.tables.folding import DEFAULT_FOLD, fold_arrays

Order = Literal["ab", "ba"]
Label = Literal["a", "b", "tie"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Pair(_Frozen):
    pair_id: str
    prompt: str
    response_a: str
    response_b: str
    generator_a: str | None = None
    generator_b: str | None = None
    human: tuple[Label, ...] = ()

    @staticmethod
    def make_id(prompt: str, response_a: str, response_b: str) -> str:
        """A stable, content-derived pair id (same texts, same id, on every machine)."""
        digest = hashlib.sha256("\x1f".join((prompt, response_a, response_b)).encode()).hexdigest()
        return digest[:16]

    def shown(self, order: Order) -> tuple[str, str]:
        """The (first, second) responses as the judge sees them in ``order``."""
        return (self.response_a, self.response_b) if order == "ab" else (self.response_b, self.response_a)


class Judgment(_Frozen):
    """One judge, one pair, one presentation order.

    ``p_first``/``p_second`` are the judge's normalized probabilities of the option shown first
    ("A" in the prompt) and second. ``verdict_shown`` is the label in prompt terms ("a" = the
    first shown). ``error`` is set, and the probabilities are NaN, when the judge answered
    off-format or the call failed: such a judgment is an exclusion with its reason, never a 0.5.
    """

    pair_id: str
    order: Order
    judge: str
    template_version: str
    raw_output: str = ""
    p_first: float = math.nan
    p_second: float = math.nan
    verdict_shown: Label | None = None
    error: str | None = None
    usage: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Judgment:
        for name in ("p_first", "p_second"):
            v = getattr(self, name)
            if not math.isnan(v) and not 0.0 <= v <= 1.0:
                raise ValueError(f"{name}={v} outside [0, 1] for pair {self.pair_id!r} ({self.order})")
        return self

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def p_a(self) -> float:
        """P(original response A is better), undoing the presentation order."""
        return self.p_first if self.order == "ab" else self.p_second

    @property
    def verdict(self) -> Label | None:
        """The verdict in terms of the original pair (undoing the order)."""
        v = self.verdict_shown
        if v is None or v == "tie" or self.order == "ab":
            return v
        return "b" if v == "a" else "a"


def combine_orders(pair: Pair, judgments: Iterable[Judgment], rule: str = DEFAULT_FOLD) -> dict:
    """Fold a judge's two orders of one pair into one judgment-table row.

    With probabilities in both orders, ``p_a`` is their mean (the self-preference paper's Eq. 3
    averaged over both positions). The verdict follows ``rule`` (``judgebias.tables.folding``): by
    default the verdict of that mean, or for verdict-only judges the common verdict of both orders,
    a verdict that flips with the order being a tie (DBG paper, A.1).
    A failed order leaves the row without a score and records why in ``judge_error``.
    """
    by_order = {j.order: j for j in judgments}
    missing = {"ab", "ba"} - by_order.keys()
    if missing:
        raise ValueError(f"pair {pair.pair_id!r}: no judgment for order(s) {sorted(missing)}")
    ab, ba = by_order["ab"], by_order["ba"]
    if ab.judge != ba.judge:
        raise ValueError(f"pair {pair.pair_id!r}: orders judged by {ab.judge!r} and {ba.judge!r}")
    errors = [f"{j.order}: {j.error}" for j in (ab, ba) if j.error]
    row = {
        "pair_id": pair.pair_id, "prompt": pair.prompt,
        "response_a": pair.response_a, "response_b": pair.response_b,
        "generator_a": pair.generator_a, "generator_b": pair.generator_b,
        "judge": ab.judge, "human": list(pair.human),
        "p_a_ab": ab.p_a if ab.ok else math.nan, "p_a_ba": ba.p_a if ba.ok else math.nan,
        "verdict_ab": ab.verdict if ab.ok else None, "verdict_ba": ba.verdict if ba.ok else None,
        "template_version": ab.template_version,
        "raw_ab": ab.raw_output, "raw_ba": ba.raw_output,
        "judge_error": "; ".join(errors) or None,
    }
    if errors:
        row.update(p_a=math.nan, verdict=None, fold_rule=None)
        return row
    both_p = not math.isnan(ab.p_a) and not math.isnan(ba.p_a)
    row["p_a"] = (ab.p_a + ba.p_a) / 2 if both_p else math.nan
    verdict, applied = fold_arrays(np.array([row["verdict_ab"]], dtype=object),
                                   np.array([row["verdict_ba"]], dtype=object),
                                   np.array([row["p_a_ab"]]), np.array([row["p_a_ba"]]), rule)
    row["verdict"], row["fold_rule"] = verdict[0], applied[0]
    return row
