"""One step of the labelling loop: draw a probability batch, record it, push it; estimate from the ledger.

Used by ``judgebias annotate push/pull/plan`` and the nightly sync flow, so both follow one rule:
a batch is recorded in the ledger (every pair it could have drawn, with its probability) BEFORE any
task is created, and a push that finds drawn pairs without a task finishes that batch instead of
drawing a new one. An interrupted push therefore never changes the design.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from judgebias.annotation.keys import keyed_pairs
from judgebias.annotation.sampling import (
    DEFAULT_DESIGN,
    DEFAULT_POPULATION,
    combined_design,
    draw_batch,
    population_frame,
)
from judgebias.annotation.store import Ledger


@dataclass(frozen=True)
class DesignSettings:
    design: str = DEFAULT_DESIGN
    population: str = DEFAULT_POPULATION
    min_prob: float | None = None
    seed: int = 0
    judges: Sequence[str] | None = None
    gold: Sequence[str] | None = None
    self_map: Mapping[str, Iterable[str]] = field(default_factory=dict)


@dataclass
class Batch:
    """The pairs to push now: ``rows`` (pair_id, pair_key, prompt, responses), whether it resumes an
    interrupted batch, and a summary of its design (batch number included) for the console."""

    rows: pd.DataFrame
    resumed: bool
    summary: dict[str, Any]


def next_batch(table: pd.DataFrame, ledger: Ledger | None, budget: int, settings: DesignSettings, *,
               record: bool = True) -> Batch:
    """Draw (and, with ``record``, record) the next batch, or return the unpushed rest of the last one."""
    texts = keyed_pairs(table)
    draws = ledger.draws() if ledger is not None else pd.DataFrame(columns=["population", "pair_key",
                                                                            "pair_id", "selected", "batch"])
    if len(draws):
        declared = set(draws["population"])
        if declared != {settings.population}:
            raise ValueError(f"this ledger samples the population {sorted(declared)}; a batch from "
                             f"{settings.population!r} would mix two designs: keep --population "
                             f"{next(iter(declared))} or start a new ledger (--ledger)")
        pushed = ledger.pushed_keys()
        pending = draws[draws["selected"] & ~draws["pair_key"].isin(pushed)]
        if len(pending):
            rows = texts.loc[pending["pair_id"]].reset_index()
            return Batch(rows, True, {"resumed_batch": int(pending["batch"].max()), "to_push": len(rows)})
    frame = population_frame(table, settings.population, judges=settings.judges,
                             gold_judges=settings.gold, self_map=settings.self_map)
    exclude = draws.loc[draws["selected"], "pair_id"] if len(draws) else []
    number = int(draws["batch"].max()) + 1 if len(draws) else 1
    drawn = draw_batch(frame, settings.design, budget, exclude=exclude,
                       seed=settings.seed * 100_003 + number, min_prob=settings.min_prob)
    before = set(exclude)
    chosen = drawn[drawn["selected"] & ~drawn.index.isin(list(before))]  # a Poisson re-draw is free
    summary = {
        "batch": number, "design": settings.design, "population": settings.population,
        "population_size": len(frame.pairs), "left_to_draw": len(frame.pairs) - len(before),
        "drawn": len(chosen), "budget": budget,
        # Poisson draws each pair on its own: the count is random around sum(pi), the expected size.
        "expected": float(drawn["pi"].sum()),
        "redrawn": int((drawn["selected"] & drawn.index.isin(list(before))).sum()),
        "pi_min": float(drawn["pi"].min()), "pi_max": float(drawn["pi"].max()),
        "per_stratum": chosen.groupby("stratum").size().to_dict(),
    }
    if record and ledger is not None:
        ledger.record_batch(design=settings.design, population=settings.population, seed=settings.seed,
                            budget=budget, params={"min_prob": settings.min_prob,
                                                   "judges": list(settings.judges or []),
                                                   "gold": list(settings.gold or [])},
                            draws=drawn)
    rows = texts.loc[chosen.index].reset_index()
    return Batch(rows, False, summary)


def design_from_ledger(ledger: Ledger, table: pd.DataFrame):
    """(design, pair ids, info) of the labels so far, or None without a recorded batch; (None, None,
    a note) while no drawn pair is labelled. A pair counts as labelled when it has a live label for
    its current texts; draws whose texts changed are dropped."""
    from judgebias.annotation.feedback import latest_per_annotator

    draws = ledger.draws()
    if draws.empty:
        return None
    current = keyed_pairs(table)["pair_key"]
    stale = draws["pair_key"] != draws["pair_id"].map(current)
    draws = draws[~stale]
    live = latest_per_annotator(ledger.labels())
    labelled_pairs = live.loc[live["pair_key"].isin(current), "pair_id"].unique() if len(live) else []
    population = str(draws["population"].iloc[0]) if len(draws) else ""
    if not len(labelled_pairs):  # right after a push: no estimate yet, and no error either
        return None, None, {"note": f"no drawn pair labelled yet ({int(draws['selected'].sum())} drawn): "
                                    "the population estimates start with the first label",
                            "stale_draws_dropped": int(stale.sum())}
    design, order, info = combined_design(draws, labelled_pairs, population=population)
    info["stale_draws_dropped"] = int(stale.sum())
    return design, order, info
